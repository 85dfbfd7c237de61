"""The bias benchmark's columns of the arena table: one arm against the base model, paired by
prompt on the same items (engine-free).

Bias % and the descriptor-free baseline % come with 95% Wilson intervals (the paper's "all"
denominator: an unparsed answer counts, as not biased); the arm's change against the base model
is an exact McNemar test over the descriptor prompts, paired by ``prompt_id``. The descriptor
effect (bias % - baseline %, in points) is the part of the bias that depends on the group named:
an arm that only learned an answer rule shows bias and baseline falling together, its effect
unchanged. Its interval is a percentile bootstrap over the two independent samples.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar

from scd.config.vocabulary import SCALES
from scd.eval.benchmarks.bias.metrics import bias_rate, records_frame
from scd.eval.records import read_records

__all__ = ["EFFECT_RESAMPLES", "EFFECT_SEED", "bias_arena", "descriptor_effect", "mcnemar_pair"]

EFFECT_RESAMPLES = 2000
EFFECT_SEED = 0


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


def _frame(result: Path | str, ids: set[str]) -> pd.DataFrame:
    """The records of ``result`` on the prompts ``ids``, as a :func:`records_frame`."""
    records = [r for r in read_records(Path(result) / "records.jsonl") if r["prompt_id"] in ids]
    df = records_frame(records)
    return df if "prompt_id" in df else df.assign(prompt_id=pd.Series(dtype=object))


def mcnemar_pair(arm: pd.Series, base: pd.Series) -> dict[str, Any]:
    """Exact McNemar test of two boolean series paired by their index (items in only one are
    left out).

    Returns:
        ``{p, to_false, to_true, n}``: the p-value, the pairs true in ``base`` and false in
        ``arm``, the reverse, and the number of pairs; p is 1.0 when no pair is discordant.
    """
    both = pd.concat({"arm": arm.astype(bool), "base": base.astype(bool)}, axis=1, join="inner")
    a, b = both["arm"], both["base"]
    table = [[int((b & a).sum()), int((b & ~a).sum())], [int((~b & a).sum()), int((~b & ~a).sum())]]
    p = float(mcnemar(table, exact=True).pvalue)
    return {"p": p, "to_false": table[0][1], "to_true": table[1][0], "n": len(both)}


def descriptor_effect(desc: np.ndarray, baseline: np.ndarray) -> tuple[float | None, ...]:
    """(mean(desc) - mean(baseline)) x 100 of two 0/1 samples, in points, with its 95% percentile
    bootstrap interval (the samples resampled apart; seeded). The interval is None when a sample
    has fewer than two values; everything is None when one is empty."""
    desc, baseline = np.asarray(desc, dtype=float), np.asarray(baseline, dtype=float)
    if not desc.size or not baseline.size:
        return None, None, None

    def diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return 100.0 * (np.mean(a, axis=axis) - np.mean(b, axis=axis))

    point = float(diff(desc, baseline))
    if desc.size < 2 or baseline.size < 2:
        return point, None, None
    res = stats.bootstrap((desc, baseline), diff, n_resamples=EFFECT_RESAMPLES, paired=False,
                          method="percentile", rng=np.random.default_rng(EFFECT_SEED))  # fmt: skip
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)


def _slug(text: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


def _tendency(desc: pd.DataFrame) -> dict[str, float | None]:
    """Per scale present: the share (%) of descriptor prompts answered with the scale's first
    option (unparsed answers count, as not the first)."""
    present = set(desc["scale"].dropna())
    scales = [s for s in SCALES if s in present] + sorted(present - set(SCALES), key=str)
    out = {}
    for scale in scales:
        rows = desc[desc["scale"] == scale]
        first = rows["first_answer"].dropna()
        option = _slug(first.iloc[0]) if len(first) else "first"
        out[f"tendency_{_slug(scale)}_{option}_pct"] = _round(100.0 * rows["first_option"].mean())
    return out


def bias_arena(result: Path | str, base: Path | str, items: Path | str) -> dict[str, Any]:
    """The bias columns of one arm (:meth:`scd.eval.benchmarks.base.Benchmark.arena`).

    Args:
        result: The arm's result directory.
        base: The base model's result directory of the same job.
        items: A result directory whose prompts (``prompt_id``) every arm is compared on; both
            the arm's and the base model's records are restricted to them.

    Returns:
        ``bias_pct, bias_ci_low, bias_ci_high, bias_n`` (descriptor prompts), ``bias_p`` (exact
        McNemar against the base model, paired by prompt), ``bias_to_unbiased`` and
        ``bias_to_biased`` (the discordant pairs: biased in the base model, not in the arm; the
        reverse), ``baseline_pct, baseline_ci_low, baseline_ci_high, baseline_n`` (the
        descriptor-free baselines), ``descriptor_effect_pts`` with ``descriptor_effect_ci_low``
        and ``_ci_high`` (bias - baseline, points; None without baselines), and
        ``tendency_<scale>_<first option>_pct`` per scale. Percentages in points, 2 decimals;
        95% intervals.
    """
    ids = {r["prompt_id"] for r in read_records(Path(items) / "records.jsonl")}
    arm, ref = _frame(result, ids), _frame(base, ids)
    desc, baseline = arm[~arm["baseline"]], arm[arm["baseline"]]
    ref_desc = ref[~ref["baseline"]]
    bias, base_rate = bias_rate(desc, "all"), bias_rate(baseline, "all")
    test = mcnemar_pair(desc.set_index("prompt_id")["biased"],
                        ref_desc.set_index("prompt_id")["biased"])  # fmt: skip
    effect = descriptor_effect(desc["biased"].to_numpy(), baseline["biased"].to_numpy())
    return {
        "bias_pct": _round(bias["pct"]),
        "bias_ci_low": _round(bias["ci_low"]),
        "bias_ci_high": _round(bias["ci_high"]),
        "bias_n": bias["n"],
        "bias_p": test["p"],
        "bias_to_unbiased": test["to_false"],
        "bias_to_biased": test["to_true"],
        "baseline_pct": _round(base_rate["pct"]),
        "baseline_ci_low": _round(base_rate["ci_low"]),
        "baseline_ci_high": _round(base_rate["ci_high"]),
        "baseline_n": base_rate["n"],
        "descriptor_effect_pts": _round(effect[0]),
        "descriptor_effect_ci_low": _round(effect[1]),
        "descriptor_effect_ci_high": _round(effect[2]),
        **_tendency(desc),
    }
