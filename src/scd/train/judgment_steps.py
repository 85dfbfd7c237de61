"""Judgment while a model trains (``train.select_judgment: true``, with ``train.select: best``).

At every measured step (``train.eval_every_steps``) the model being trained answers the
relevance controls of the **training templates** with the **evaluation cues**, on the setting's
training side (its principle, scenario and scale filters): prompts no training row holds (a
contrast arm's twins use the training cues) and never one of the judgment's held-out templates,
on which the arena's gate is measured. The same model with its adapter switched off answers them
once, at the first measured step. The step passes the arena's gate
(:func:`scd.eval.benchmarks.judgment_gate.gate`) or not, and ``train.select: best`` keeps the
lowest-bias step among those that pass.

Logged beside the bias measures: ``eval_judgment_pct`` (the warranted-answer share) and
``eval_judgment_gate`` (1 kept, 0 lost; absent where the adapter-off model reads no cue).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from scd.io import read_manifest

__all__ = ["JudgmentCheck", "judgment_rows"]


def judgment_rows(sft_dir: Path | str) -> list[dict[str, Any]]:
    """The relevance controls measured while training on ``sft_dir`` (module docstring)."""
    from scd.data_gen.contrast import FILTERED, heldout_templates
    from scd.data_gen.relevance import relevance_rows

    manifest = read_manifest(sft_dir)
    if "used" not in manifest and manifest.get("sft"):  # an arm's rows: its setting's SFT data
        manifest = read_manifest(manifest["sft"])
    filters = {k: v for k, v in manifest.get("used", {}).get("train", {}).items() if k in FILTERED}
    held = set(heldout_templates())
    return [
        r
        for r in relevance_rows()
        if f"{r['principle']}.{r['scenario']}" not in held
        and all(r[k] in v for k, v in filters.items())
    ]


class JudgmentCheck:
    """The relevance controls of :func:`judgment_rows`, scored by a model in memory."""

    def __init__(self, sft_dir: Path | str, tokenizer: Any, protocol: Any, system_prompt: Any):
        from scd.eval.benchmarks.judgment import JudgmentTask
        from scd.models.formatting import Formatter

        self.rows = judgment_rows(sft_dir)
        self.task = JudgmentTask({}, self.rows, len(self.rows), None, protocol=protocol)  # type: ignore[arg-type]
        self.task.fmt = Formatter(tokenizer, system_prompt)
        self.base: list[dict[str, Any]] | None = None  # the adapter-off model's records

    def measure(self, model: Any, engine: Any) -> dict[str, Any]:
        """``eval_judgment_pct`` and ``eval_judgment_gate`` of ``model`` (through ``engine``)."""
        from peft import PeftModel

        from scd.eval.benchmarks.judgment_gate import gate

        self.task.engine = engine
        if self.base is None:
            off = model.disable_adapter if isinstance(model, PeftModel) else contextlib.nullcontext
            with off():
                self.base = self.task.score(self.rows)
        records = self.task.score(self.rows)
        warranted = sum(r["warranted"] for r in records)
        out: dict[str, Any] = {"eval_judgment_pct": round(100.0 * warranted / len(records), 4)}
        verdict = gate(records, self.base)
        if verdict["kept"] is not None:
            out["eval_judgment_gate"] = int(verdict["kept"])
        return out
