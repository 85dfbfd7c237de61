"""What a tuned model's evaluations say, beside the base model's on the same items: for the W&B
run that trained it (:mod:`scd.report.wandb_log`) and its Hub model card
(:mod:`scd.report.model_card`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from scd.eval.benchmarks import REGISTRY

__all__ = ["TunedResults", "tuned_results"]


@dataclass
class TunedResults:
    """``headline``: each benchmark's headline numbers, ``<job>/<name>``; ``before`` and
    ``after``: per job, its arena columns for the base and the tuned model on the tuned
    result's items (``after`` with the paired test against the base, ``*_p``); ``flips``: per
    job, the items whose answer changed."""

    headline: dict[str, Any] = field(default_factory=dict)
    before: dict[str, dict[str, Any]] = field(default_factory=dict)
    after: dict[str, dict[str, Any]] = field(default_factory=dict)
    flips: dict[str, pd.DataFrame] = field(default_factory=dict)


def tuned_results(results: dict[str, str], before: dict[str, str] | None = None) -> TunedResults:
    """The :class:`TunedResults` of a tuned model's result directories (``results``: job name
    -> directory) against the base model's (``before``: job name -> directory); a job without a
    finished result, or without the base model's, adds only what it has."""
    out = TunedResults()
    for name, where in results.items():
        path = Path(where) / "summary.json"
        if not (path.is_file() and name in REGISTRY):
            continue
        bench, items = REGISTRY[name], Path(where)
        headline = bench.headline(json.loads(path.read_text()))
        out.headline.update({f"{name}/{k}": v for k, v in headline.items()})
        base = (before or {}).get(name)
        if not (base and (Path(base) / "summary.json").is_file()):
            continue
        after = bench.arena(items, Path(base), items)
        was = bench.arena(Path(base), Path(base), items)  # the base model on the same items
        paired = [k for k in after if k.endswith("_p") or "_to_" in k]  # against the base
        out.after[name] = after
        out.before[name] = {k: v for k, v in was.items() if k in after and k not in paired}
        changed = bench.flips(items, Path(base), items)
        if changed is not None:
            out.flips[name] = changed
    return out
