"""A run's ``layout.json``: where each of its plan's results is (or will be) -- the model and its
fingerprint, the prompt sets, the base model's evaluations, each setting's SCD adapter and
evaluations, and with the arena's arms every arm's results -- so that ``scd report`` can show a
run before its jobs are done. ``run``: the :class:`scd.pipeline.run.Run` the plan is of."""

from __future__ import annotations

from typing import Any

from scd.config.vocabulary import SCD_ARM
from scd.io import json_text, write_json
from scd.models import model_fingerprint
from scd.pipeline.plan import Plan
from scd.pipeline.run_interface import JobRunner

__all__ = ["write_layout"]


def write_layout(run: JobRunner, plan: Plan) -> None:
    """``layout.json`` of ``run``'s directory, rewritten only when it changes."""
    base = {k: str(v) for k, v in plan.arms[0].evals.items()}
    settings: dict[str, Any] = {}
    for a in plan.arms:  # SCD's adapter of each setting (with seeds: the first seed's)
        if a.arm == SCD_ARM:
            settings.setdefault(
                str(a.setting),
                {
                    "sft": str(a.sft),  # the setting's SFT data
                    "adapter": str(a.adapter),
                    "evals": {k: str(v) for k, v in a.evals.items()},
                },
            )
    layout = {
        "model": run.model,
        "fingerprint": model_fingerprint(run.model),
        "prompts": str(run.prompts),
        "eval_prompts": str(run.eval_prompts) if run.eval_prompts else None,
        "base": base,
        "settings": settings,
    }
    if plan.arena:
        layout["arms"] = [a.to_dict() for a in plan.arms]
    path = run.dir / "layout.json"
    if not path.is_file() or path.read_text() != json_text(layout):
        write_json(path, layout)
