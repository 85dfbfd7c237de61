"""The BBQ benchmark's columns of the arena table: one arm against the base model on the same
items (engine-free).

Accuracies and bias scores are :func:`~scd.eval.benchmarks.bbq.metrics.bbq_metrics`' (Parrish et
al. 2022); the bias scores' 95% intervals are a percentile bootstrap over items (records
resampled, seeded), the arm's change in correctness against the base model an exact McNemar
test, paired by item id.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from scd.eval.benchmarks.bbq.metrics import bbq_metrics, metrics_block
from scd.eval.benchmarks.paired import finite, mcnemar_pair
from scd.eval.records import read_records

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "bbq_arena",
    "bias_score_intervals",
]

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
_TAILS = ("", "_ci_low", "_ci_high")  # a value's column, its interval's


def _records(result: Path | str, ids: set[str]) -> list[dict[str, Any]]:
    return [r for r in read_records(Path(result) / "records.jsonl") if r["id"] in ids]


def bias_score_intervals(records: list[dict[str, Any]]) -> dict[str, tuple[float, float] | None]:
    """95% percentile bootstrap intervals of s_DIS and s_AMB over items (the records resampled
    with replacement, :data:`BOOTSTRAP_RESAMPLES` times, seeded), each score as
    :func:`~scd.eval.benchmarks.bbq.metrics.bbq_metrics` computes it overall.

    Returns:
        ``{"s_dis": (low, high) | None, "s_amb": ...}``: None where the score or its interval is
        undefined (fewer than two records, or resamples without a prediction to count).
    """
    point = metrics_block(records)
    keys = [k for k in ("s_dis", "s_amb") if point[k] is not None]
    out: dict[str, tuple[float, float] | None] = {"s_dis": None, "s_amb": None}
    if len(records) < 2 or not keys:
        return out

    def scores(index: np.ndarray) -> np.ndarray:
        block = metrics_block([records[i] for i in index])
        return np.array([np.nan if block[k] is None else block[k] for k in keys], dtype=float)

    with warnings.catch_warnings():
        # A resample without a prediction to count scores NaN, so the score's interval is NaN:
        # scipy warns of it (DegenerateDataWarning), and it is None below, as documented.
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap(
            (np.arange(len(records)),),
            scores,
            n_resamples=BOOTSTRAP_RESAMPLES,
            vectorized=False,
            method="percentile",
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
    for k, low, high in zip(keys, *res.confidence_interval):
        out[k] = (float(low), float(high)) if np.isfinite([low, high]).all() else None
    return out


def _pct(recs: list[dict[str, Any]], key: str) -> float | None:
    return finite(100.0 * np.mean([bool(r[key]) for r in recs])) if recs else None


def bbq_arena(result: Path | str, base: Path | str, items: Path | str) -> dict[str, Any]:
    """The BBQ columns of one arm (:meth:`scd.eval.benchmarks.base.Benchmark.arena`).

    Args:
        result: The arm's result directory.
        base: The base model's result directory of the same job.
        items: A result directory whose items (``id``) every arm is compared on; both the arm's
            and the base model's records are restricted to them.

    Returns:
        ``bbq_accuracy``, ``bbq_acc_amb``, ``bbq_acc_dis`` (fractions, each with ``_ci_low`` and
        ``_ci_high``: 95% Wilson), ``bbq_n``, ``bbq_unknown_amb_pct`` and ``bbq_unknown_dis_pct``
        (% of ambiguous / disambiguated items answered with the unknown option), ``bbq_s_dis``
        and ``bbq_s_amb`` (each with a bootstrap ``_ci_low`` and ``_ci_high``), and ``bbq_p``
        (exact McNemar on correctness against the base model, paired by item). None where
        undefined.
    """
    ids = {r["id"] for r in read_records(Path(items) / "records.jsonl")}
    arm, ref = _records(result, ids), _records(base, ids)
    block = bbq_metrics(arm)["overall"]
    out: dict[str, Any] = {}
    for name, key in (
        ("accuracy", "accuracy"),
        ("acc_amb", "accuracy_ambiguous"),
        ("acc_dis", "accuracy_disambiguated"),
    ):
        acc = block[key] or {"accuracy": None, "ci95": (None, None)}
        low, high = acc["ci95"]
        values = (acc["accuracy"], low, high)
        out |= {f"bbq_{name}{tail}": finite(v) for tail, v in zip(_TAILS, values)}
    out["bbq_n"] = len(arm)
    for cond, short in (("ambig", "amb"), ("disambig", "dis")):
        out[f"bbq_unknown_{short}_pct"] = _pct(
            [r for r in arm if r["context_condition"] == cond], "pred_is_unknown"
        )
    intervals = bias_score_intervals(arm)
    for key in ("s_dis", "s_amb"):
        low, high = intervals[key] or (None, None)
        values = (block[key], low, high)
        out |= {f"bbq_{key}{tail}": finite(v) for tail, v in zip(_TAILS, values)}
    correct = [
        pd.Series({r["id"]: bool(r["correct"]) for r in recs}, dtype=bool) for recs in (arm, ref)
    ]
    out["bbq_p"] = mcnemar_pair(*correct)["p"]
    return out
