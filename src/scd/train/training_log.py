"""What a training says as it goes: one readable line per log entry (under the progress bar on a
terminal, plain lines in a log file), the log of a resumed run's checkpoint again into its W&B
run, and the mean loss of the whole training across resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from scd.train.bias_steps import bias_line

__all__ = ["log_history", "log_line", "log_lines", "mean_loss"]
# not history: the step (logged as train/global_step), and what transformers puts into the
# summary at the end of a training
END_OF_TRAINING = {"step", "train_runtime", "train_samples_per_second", "train_steps_per_second",
                   "train_loss", "total_flos"}  # fmt: skip


def log_line(state: Any, logs: dict[str, Any]) -> str:
    """One readable line for a training log entry ("step 10/50  loss 0.4739  lr 3.0e-04 ...")."""
    if "train_loss" in logs:  # the last entry (every one has train_runtime with tokens counted)
        mean = f", mean loss {float(logs['train_loss']):.4f} (this session's steps)"
        return f"trained {state.global_step} steps in {float(logs['train_runtime']):.0f} s{mean}"
    if "eval_bias_pct" in logs:  # train.eval_every_steps
        return bias_line(state.global_step, state.max_steps, logs)
    head = "eval" if any(k.startswith("eval_") for k in logs) else "step"
    parts = [f"{head} {state.global_step}/{state.max_steps}"]
    names = {"loss": "loss", "eval_loss": "loss", "learning_rate": "lr",
             "grad_norm": "grad norm", "mean_token_accuracy": "token acc",
             "eval_mean_token_accuracy": "token acc"}  # fmt: skip
    for key, name in names.items():
        if key in logs:
            value = float(logs[key])
            parts.append(f"{name} {value:.1e}" if key == "learning_rate" else f"{name} {value:.4f}")
    return "  ".join(parts)


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


def log_history(run: Any, checkpoint: str) -> None:
    """The training log of ``checkpoint`` into the resumed ``run`` under the names transformers'
    W&B callback uses (x axis ``train/global_step``): a killed process loses the records W&B had
    not written yet. Steps the run already holds are skipped where W&B says which (online: its
    summary); an offline run's second segment repeats them, with the same values."""
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    held = run.summary.get("train/global_step") or 0
    for entry in state["log_history"]:
        step = entry.get("step", 0)
        items = {k.replace("eval_", "eval/", 1) if k.startswith("eval_") else f"train/{k}": v
                 for k, v in entry.items()
                 if k not in END_OF_TRAINING and isinstance(v, (int, float))}  # fmt: skip
        if step > held and items:
            run.log({**items, "train/global_step": step})


def mean_loss(history: list[dict[str, Any]]) -> float | None:
    """The mean training loss over every step the log history covers (a resumed run's history
    starts with the steps of the run it continues), each logged mean weighted by the steps since
    the log before it -- exact where checkpoints fall on logging steps, as in scd's recipes."""
    total = steps = last = 0
    for entry in history:
        if "loss" in entry and "step" in entry:
            total += float(entry["loss"]) * (entry["step"] - last)
            steps, last = steps + entry["step"] - last, entry["step"]
    return total / steps if steps else None
