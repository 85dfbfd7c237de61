"""Bias while a model trains (``train.eval_every_steps: N``).

Every N optimizer steps the model being trained (by TRL's SFT, DPO or KTO trainer) -- no reload:
its PEFT layers on, dropout off -- answers a fixed stratified subset of about
``train.eval_prompts`` validation prompts (whole sets, seeded by ``train.seed``) and their
descriptor-free baselines, chosen as ``scd eval bias`` chooses (the recipe's protocol and rule,
choice mode). The validation prompts are the training side's prompts that no training row uses
(``SFT_DIR/validation``, :func:`scd.data_gen.sft.write_sft`): never a held-out prompt, so a
step can be picked on them without looking at the test.

Each measurement is one entry of the trainer's log history (kept in every checkpoint: a resumed
training has each step once), one line of the training log and, with W&B, ``eval/bias_pct`` ...
against ``train/global_step``:

- ``eval_bias_pct`` (descriptor prompts, %) with its 95% Wilson interval (``eval_bias_ci_low``,
  ``eval_bias_ci_high``) and ``eval_bias_n``;
- ``eval_baseline_pct``: the descriptor-free baselines of the same templates;
- ``eval_descriptor_effect_pts``: bias - baseline, in points -- what depends on the group named
  (an answer rule moves bias and baseline together);
- ``eval_first_option_pct``: the answer tendency, the share of descriptor prompts answered with
  their first option ("Likely", "Mostly", ...);
- with ``train.select: best``, ``eval_kl`` (and ``eval_kl_ci_low``, ``_ci_high``): the drift from
  the base model on scd's neutral prompts, as the arena measures it
  (:func:`scd.eval.capability.kl_in_memory`: the same model, its adapter off);
- with ``train.select_judgment``, ``eval_judgment_pct`` and ``eval_judgment_gate``: the
  relevance controls of the training templates and whether the step passes the arena's judgment
  gate against the adapter-off model (:mod:`scd.train.judgment_steps`);
- ``eval_bias_seconds``: what the measurement took (its share of training time).

``train.select: best`` saves a checkpoint at each measured step and keeps the adapter of the step
with the lowest validation bias (ties: the lower KL, then the earlier step) whose KL stays within
``train.max_kl`` (and, with ``train.select_judgment``, that passes the judgment gate);
transformers keeps that checkpoint through ``save_total_limit``
(``TrainerState.best_model_checkpoint``), also across a resume. :func:`selection` says which
step was kept and why (``train_manifest.json``, the report).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from scd.config.schema import TrainSpec
from scd.errors import InputError
from scd.io import read_manifest
from scd.train.spec import TrainingSpec

__all__ = ["KEYS", "bias_callback", "bias_line", "bias_measures", "selection", "validation_rows"]

KEYS = (
    "eval_bias_pct",
    "eval_bias_ci_low",
    "eval_bias_ci_high",
    "eval_bias_n",
    "eval_baseline_pct",
    "eval_descriptor_effect_pts",
    "eval_first_option_pct",
    "eval_kl",
    "eval_kl_ci_low",
    "eval_kl_ci_high",
    "eval_judgment_pct",
    "eval_judgment_gate",
    "eval_bias_seconds",
)


def validation_rows(sft_dir: Path | str, n_prompts: int, seed: int) -> list[dict[str, Any]]:
    """The work list of a setting's validation prompts: ~``n_prompts`` descriptor prompts (whole
    sets, stratified as ``scd eval bias --limit``), then their baselines. An arena arm's rows
    (the general control, DPO and KTO rows) use those of the SFT data they were made from.

    Raises:
        InputError: SFT data without validation prompts (written before scd made them, or
            every training-side prompt is a training row).
    """
    from scd.eval.benchmarks.bias.task import load_work

    directory = Path(sft_dir) / "validation"
    source = read_manifest(sft_dir).get("sft")  # an arm's rows made from a setting's SFT data
    if not directory.is_dir() and source:
        directory = Path(source) / "validation"
    if not (directory / "prompts.parquet").is_file():
        raise InputError(
            f"train.eval_every_steps: {sft_dir} has no validation prompts (SFT data "
            "from an older scd: generate it again)"
        )
    rows = load_work(directory, n_prompts, seed)
    if not any(not r["baseline"] for r in rows):
        raise InputError(
            "train.eval_every_steps: no validation prompts: every training-side "
            "prompt of the setting is a training row (lower data.max_train)"
        )
    return rows


def bias_measures(records: list[dict[str, Any]]) -> dict[str, float]:
    """The :data:`KEYS` of one measurement's records (those without a value left out: no
    baselines, no effect)."""
    from scd.eval.benchmarks.bias.metrics import bias_rate, records_frame

    df = records_frame(records)
    desc, baseline = df[~df["baseline"]], df[df["baseline"]]
    cell = bias_rate(desc)
    out = {
        "eval_bias_pct": cell["pct"],
        "eval_bias_ci_low": cell["ci_low"],
        "eval_bias_ci_high": cell["ci_high"],
        "eval_bias_n": cell["n"],
        "eval_first_option_pct": 100.0 * float(desc["first_option"].mean()),
    }
    if len(baseline):
        out["eval_baseline_pct"] = bias_rate(baseline)["pct"]
        out["eval_descriptor_effect_pts"] = out["eval_bias_pct"] - out["eval_baseline_pct"]
    return {k: round(float(v), 4) for k, v in out.items() if v is not None and not math.isnan(v)}


def bias_line(step: int, max_steps: int, logs: dict[str, Any]) -> str:
    """``bias 10/50  validation 23.3% [15.2, 33.1] (n=60)  baseline 20.0%  descriptor effect
    +3.3 pts  first option 55.0%``."""
    parts = [
        f"bias {step}/{max_steps}",
        f"validation {logs['eval_bias_pct']:.1f}% [{logs.get('eval_bias_ci_low', 0):.1f}, "
        f"{logs.get('eval_bias_ci_high', 0):.1f}] (n={int(logs['eval_bias_n'])})",
    ]
    if "eval_baseline_pct" in logs:
        parts += [
            f"baseline {logs['eval_baseline_pct']:.1f}%",
            f"descriptor effect {logs['eval_descriptor_effect_pts']:+.1f} pts",
        ]
    parts.append(f"first option {logs['eval_first_option_pct']:.1f}%")
    if "eval_kl" in logs:
        parts.append(f"KL {logs['eval_kl']:.4f}")
    if "eval_judgment_pct" in logs:
        gate = {1: ", gate kept", 0: ", gate lost"}.get(logs.get("eval_judgment_gate"), "")
        parts.append(f"judgment {logs['eval_judgment_pct']:.1f}%{gate}")
    return "  ".join(parts)


def _measured(state: Any) -> dict[int, dict[str, Any]]:
    return {e["step"]: e for e in state.log_history if KEYS[0] in e}


def _rank(entry: dict[str, Any]) -> tuple[float, float, int]:
    return entry["eval_bias_pct"], entry.get("eval_kl", 0.0), entry["step"]


def _best(state: Any, max_kl: float | None, judgment: bool = False) -> dict[str, Any] | None:
    within = [
        e
        for e in _measured(state).values()
        if (max_kl is None or e.get("eval_kl", math.inf) <= max_kl)
        and not (judgment and e.get("eval_judgment_gate") == 0)
    ]
    return min(within, key=_rank, default=None)


def selection(t: TrainSpec, state: Any) -> dict[str, Any]:
    """Which step's adapter a finished training keeps, and why (``train.select``)."""
    if t.select == "last":
        return {"rule": "last", "step": state.global_step, "why": "the last step (train.select)"}
    measured, best = _measured(state), _best(state, t.max_kl, t.select_judgment)
    conditions = [f"KL <= {t.max_kl}"] * (t.max_kl is not None)
    conditions += ["the judgment gate kept"] * bool(t.select_judgment)
    wanted = " and ".join(conditions)
    if best is None:
        return {
            "rule": "best",
            "step": state.global_step,
            "max_kl": t.max_kl,
            "why": f"no measured step of {len(measured)} had {wanted}: the last step kept"
            if wanted
            else "no step was measured: the last step kept",
        }
    why = f"the lowest validation bias of {len(measured)} measured steps"
    why += f" with {wanted}" if wanted else ""
    return {
        "rule": "best",
        "step": best["step"],
        "max_kl": t.max_kl,
        **{k: best[k] for k in ("eval_bias_pct", "eval_kl", "eval_judgment_gate") if k in best},
        "why": why,
    }


def bias_callback(spec: TrainingSpec, sft_dir: Path, tokenizer: Any) -> Any:
    """A ``TrainerCallback`` measuring bias every ``train.eval_every_steps`` steps (see the
    module docstring); give it the trainer (``callback.trainer = trainer``) before training.

    Raises:
        InputError: see :func:`validation_rows`.
    """
    from transformers import Trainer, TrainerCallback

    from scd.eval.benchmarks.bias.task import BiasTask
    from scd.eval.engines.hf import HFEngine
    from scd.models.formatting import Formatter
    from scd.models.protocols import get_protocol

    t, check = spec.train, spec.bias
    every, best = t.eval_every_steps, t.select == "best"
    rows = validation_rows(sft_dir, t.eval_prompts, t.seed)
    neutral, base_cache = None, {}  # the adapter-off model's side of the KL, measured once
    if best:
        from peft import PeftModel

        from scd.eval.capability import kl_in_memory, load_neutral_prompts

        neutral = load_neutral_prompts(check.neutral_prompts)[1]
    protocol = get_protocol(check.protocol)
    rule = check.rule or protocol.rule
    task = BiasTask({}, rows, len(rows), None, protocol=protocol, rule=rule)  # type: ignore[arg-type]
    task.fmt = Formatter(tokenizer, check.system_prompt)
    batch = check.batch_size
    judged = None
    if t.select_judgment:
        from scd.train.judgment_steps import JudgmentCheck

        judged = JudgmentCheck(sft_dir, tokenizer, protocol, check.system_prompt)

    class BiasEveryNSteps(TrainerCallback):
        trainer: Any = None

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001
            if state.global_step % every:
                return
            if best:  # every measured step saved (by every rank: a save may be collective)
                control.should_save = True
            if not state.is_world_process_zero:
                return
            task.engine = HFEngine.in_memory(model, tokenizer, batch)
            training, started = model.training, time.perf_counter()
            model.eval()
            try:
                measures = bias_measures(task.score(rows))
                if neutral is not None:
                    # the base (a PEFT model's adapter switched off) does not train: kept
                    cache = base_cache if isinstance(model, PeftModel) else None
                    kl = kl_in_memory(model, tokenizer, neutral, batch or 8, base_cache=cache)
                    measures.update(
                        {f"eval_{k}": round(v, 6) for k, v in kl.items() if v is not None}
                    )
                if judged is not None:
                    measures.update(judged.measure(model, task.engine))
            finally:
                model.train(training)
            measures["eval_bias_seconds"] = round(time.perf_counter() - started, 3)
            # transformers' own log (TRL's would fold its running training metrics into it),
            # which clears the flag that has the trainer log this step's loss: kept
            should_log = control.should_log
            Trainer.log(self.trainer, measures)
            control.should_log = should_log
            if best:  # transformers keeps the best one's checkpoint (save_total_limit, resume)
                chosen = _best(state, t.max_kl, t.select_judgment)
                if chosen is not None:
                    step = chosen["step"]
                    state.best_model_checkpoint = str(Path(args.output_dir) / f"checkpoint-{step}")
                    state.best_metric = chosen["eval_bias_pct"]

    return BiasEveryNSteps()
