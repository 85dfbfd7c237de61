"""What a training says as it goes: one readable line per log entry (under the progress bar on a
terminal, plain lines in a log file), its W&B history (one row per training step, each step
once across a kill and a resume; the run started and finished here), and the mean loss of the
whole training across resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from scd.config.schema import Recipe
from scd.io import atomic_file
from scd.tracking import finish_run, held_step, redact, start_run
from scd.train.bias_steps import bias_line
from scd.train.saving import as_ran, log_adapter

__all__ = [
    "finish_tracking",
    "last_step_logged",
    "log_history",
    "log_line",
    "log_lines",
    "mean_loss",
    "start_tracking",
    "wandb_at_steps",
]
# not history: the step (logged as train/global_step), and what transformers puts into the
# summary at the end of a training
END_OF_TRAINING = {
    "step",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "total_flos",
}


def log_line(state: Any, logs: dict[str, Any]) -> str:
    """One readable line for a training log entry ("step 10/50  loss 0.4739  lr 3.0e-04 ...")."""
    if "train_loss" in logs:  # the last entry (every one has train_runtime with tokens counted)
        loss = mean_loss(state.log_history)  # the training loss: over every step, as recorded
        mean = "" if loss is None else f", training loss {loss:.4f} (the mean over every step)"
        return f"trained {state.global_step} steps in {float(logs['train_runtime']):.0f} s{mean}"
    if "eval_bias_pct" in logs:  # train.eval_every_steps
        return bias_line(state.global_step, state.max_steps, logs)
    head = "eval" if any(k.startswith("eval_") for k in logs) else "step"
    parts = [f"{head} {state.global_step}/{state.max_steps}"]
    names = {
        "loss": "loss",
        "eval_loss": "loss",
        "learning_rate": "lr",
        "grad_norm": "grad norm",
        "mean_token_accuracy": "token acc",
        "eval_mean_token_accuracy": "token acc",
    }
    for key, name in names.items():
        if key in logs:
            value = float(logs[key])
            parts.append(f"{name} {value:.1e}" if key == "learning_rate" else f"{name} {value:.4f}")
    return "  ".join(parts)


def last_step_logged() -> Any:
    """A callback that logs the last training step too when it does not fall on a logging
    step, so that the log history -- and the training loss of :func:`mean_loss` -- covers every
    step (transformers logs every ``logging_steps`` only)."""
    from transformers import TrainerCallback

    class LastStepLogged(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if state.global_step >= state.max_steps:
                control.should_log = True

    return LastStepLogged()


def log_lines(bar: bool) -> Any:
    """A callback writing :func:`log_line` for each log: under transformers' progress bar on a
    terminal, as plain lines in a log file."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class LogLines(ProgressCallback if bar else PrinterCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            if state.is_world_process_zero and logs:
                if bar and self.training_bar is not None:
                    self.training_bar.write(log_line(state, logs))
                elif not bar:
                    print(log_line(state, logs), file=sys.stderr, flush=True)

    return LogLines


def _wandb_items(entry: dict[str, Any]) -> dict[str, Any]:
    """A training log entry under the names transformers' W&B callback gives it."""
    from transformers.integrations.integration_utils import rewrite_logs

    return rewrite_logs({k: v for k, v in entry.items() if k not in END_OF_TRAINING})


def log_history(run: Any, checkpoint: str, held: int) -> None:
    """The training log of ``checkpoint`` after step ``held`` (what the run holds already:
    :func:`scd.tracking.held_step`) into the resumed ``run``, each entry at its training step:
    a killed process loses the records W&B had not written yet."""
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    for entry in state["log_history"]:
        step = entry.get("step", 0)
        items = {k: v for k, v in _wandb_items(entry).items() if isinstance(v, (int, float))}
        if step > held and items:
            run.log({**items, "train/global_step": step}, step=step)


def wandb_at_steps(held: int) -> Any:
    """transformers' W&B callback with one change: W&B's step is the training step, so that
    what is logged at one training step (its loss, its bias measurement) is one history row,
    and the steps a continued run holds from an earlier process (``held``: up to the step the
    process was killed at, which may be past its last checkpoint) are not logged again."""
    from transformers.integrations import WandbCallback

    class WandbAtSteps(WandbCallback):
        def on_log(self, args, state, control, model=None, logs=None, **kwargs):  # noqa: ANN001
            if self._wandb is None or state.global_step <= held:
                return
            if not self._initialized:
                self.setup(args, state, model)
            if state.is_world_process_zero:
                self._wandb.run.summary.update(
                    {k: v for k, v in logs.items() if k in END_OF_TRAINING and k != "step"}
                )
                step = state.global_step
                self._wandb.log({**_wandb_items(logs), "train/global_step": step}, step=step)

    return WandbAtSteps()


def mean_loss(history: list[dict[str, Any]]) -> float | None:
    """The training loss, as scd reports it everywhere (stdout, the manifest, W&B, the model
    card): the mean loss over every step the log history covers (a resumed run's history starts
    with the steps of the run it continues; the last step is logged too,
    :func:`last_step_logged`), each logged mean weighted by the steps since the log before it --
    exact where checkpoints fall on logging steps, as in scd's recipes."""
    total = steps = last = 0
    for entry in history:
        if "loss" in entry and "step" in entry:
            total += float(entry["loss"]) * (entry["step"] - last)
            steps, last = steps + entry["step"] - last, entry["step"]
    return total / steps if steps else None


def start_tracking(
    recipe: Recipe, args: Any, out: Path, manifest: dict[str, Any], checkpoint: str | None
) -> tuple[Any, int]:
    """The W&B run of the training (one across kills and resumes: its id kept in ``out``), with
    the steps a killed process had not written to it logged again from the checkpoint; and the
    last training step the run holds (-1: none). Its config holds the recipe as it runs under
    TRL's config ``args`` (a CPU's optimizer, not the paged one the recipe names)."""
    id_file = out / "wandb_run_id"
    known = (id_file.read_text().strip() or None) if checkpoint and id_file.is_file() else None
    run = start_run(
        project=recipe.wandb.project,
        name=recipe.wandb.run_name or out.name,
        group=recipe.wandb.group,
        entity=recipe.wandb.entity,
        config={
            "recipe": redact(as_ran(recipe, args).to_dict()),
            "data_manifest": manifest,
            "protocol": recipe.bias_protocol,
        },
        directory=out,
        job_type="train",
        run_id=known,
    )
    with atomic_file(id_file) as tmp:
        tmp.write_text(run.id + "\n")
    held = -1
    if known:
        held = held_step(run)
        log_history(run, checkpoint, held)
    return run, held


def finish_tracking(
    run: Any, upload_adapter: bool, out: Path, info: dict[str, Any], model_path: str
) -> None:
    """The training's results into its W&B run's summary (and, with ``upload_adapter``:
    ``wandb.log_adapter``, the adapter as an artifact)."""
    from scd.models import model_fingerprint

    skip = ("log_history", "bias_history", "train_loss")
    meta = {k: v for k, v in info.items() if k not in skip}
    run.summary.update({f"scd/{k}": v for k, v in meta.items() if v is not None})
    run.summary["train_loss"] = info["train_loss"]  # every step's (not this process's)
    if upload_adapter:
        fingerprint = model_fingerprint(model_path)
        extra = {"train_loss": info["train_loss"], "base_model_fingerprint": fingerprint}
        log_adapter(run, out, {**meta, **extra})
    finish_run(run)
