"""The bias benchmark's columns of the arena table: one arm against the base model, paired by
prompt on the same items (engine-free).

Prompts written from one template are not independent of one another, so bias %, its change
against the base model on the same prompts and the descriptor effect come with intervals from a
percentile bootstrap that resamples whole clusters, and the change with the exact sign-flip test
over them (:mod:`scd.eval.benchmarks.clusters`; the unit: templates by default, template cells
on request, the other unit's p beside). The paper's "all" denominator: an unparsed answer
counts, as not biased. The Wilson interval and the exact McNemar test over prompts (which treat
them as independent) are kept beside them; the descriptor-free baselines, one or a few per cell,
keep Wilson intervals. The descriptor effect (bias % - baseline %, in points) is the part of the
bias that depends on the group named: an arm that only learned an answer rule shows bias and
baseline falling together. Its interval resamples the same clusters, each with its descriptor
prompts and their baselines (a baseline prompt's cell is the template cell whose descriptor
prompts it is the baseline of).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from scd.config.vocabulary import SCALES
from scd.eval.benchmarks.bias.metrics import bias_rate, records_frame
from scd.eval.benchmarks.clusters import cluster_change, cluster_rate, unit_keys
from scd.eval.benchmarks.paired import finite, mcnemar_pair
from scd.eval.records import read_records

__all__ = [
    "EFFECT_RESAMPLES",
    "EFFECT_SEED",
    "bias_arena",
    "bias_flips",
    "descriptor_effect",
]

EFFECT_RESAMPLES = 2000
EFFECT_SEED = 0


def _frame(result: Path | str, ids: set[str]) -> pd.DataFrame:
    """The records of ``result`` on the prompts ``ids``, as a :func:`records_frame`."""
    records = [r for r in read_records(Path(result) / "records.jsonl") if r["prompt_id"] in ids]
    df = records_frame(records)
    return df if "prompt_id" in df else df.assign(prompt_id=pd.Series(dtype=object))


def descriptor_effect(
    desc: pd.DataFrame, baseline: pd.DataFrame, unit: str = "template"
) -> tuple[float | None, ...]:
    """(bias of ``desc`` - bias of ``baseline``) x 100 in points, with its 95% percentile
    bootstrap interval over the clusters of ``unit`` (:func:`~scd.eval.benchmarks.clusters.
    unit_keys`) that hold both: each resample draws clusters with replacement and pools their
    prompts (seeded). The interval is None with fewer than two such clusters; everything is
    None when a side is empty."""
    if desc.empty or baseline.empty:
        return None, None, None
    keys = list(unit_keys(unit))
    counts = pd.concat(
        {
            "d": desc.groupby(keys)["biased"].agg(["sum", "count"]),
            "b": baseline.groupby(keys)["biased"].agg(["sum", "count"]),
        },
        axis=1,
        join="inner",
    )
    point = 100.0 * (desc["biased"].mean() - baseline["biased"].mean())
    if len(counts) < 2:
        return float(point), None, None
    arrays = [counts[k].to_numpy(dtype=float) for k in counts.columns]

    def diff(ds: Any, dn: Any, bs: Any, bn: Any, axis: int = -1) -> Any:
        return 100.0 * (ds.sum(axis) / dn.sum(axis) - bs.sum(axis) / bn.sum(axis))

    res = stats.bootstrap(
        arrays,
        diff,
        n_resamples=EFFECT_RESAMPLES,
        paired=True,
        method="percentile",
        rng=np.random.default_rng(EFFECT_SEED),
    )
    return float(point), float(res.confidence_interval.low), float(res.confidence_interval.high)


def _clusters(frame: pd.DataFrame, unit: str) -> list[tuple]:
    """Each row's cluster under ``unit``."""
    return list(frame[list(unit_keys(unit))].itertuples(index=False, name=None))


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
        out[f"tendency_{_slug(scale)}_{option}_pct"] = finite(100.0 * rows["first_option"].mean())
    return out


def bias_arena(
    result: Path | str, base: Path | str, items: Path | str, unit: str = "template"
) -> dict[str, Any]:
    """The bias columns of one arm (:meth:`scd.eval.benchmarks.base.Benchmark.arena`).

    Args:
        result: The arm's result directory.
        base: The base model's result directory of the same job.
        items: A result directory whose prompts (``prompt_id``) every arm is compared on; both
            the arm's and the base model's records are restricted to them.
        unit: The cluster unit of the intervals and tests (``template`` or ``cell``).

    Returns:
        ``bias_pct`` with ``bias_ci_low`` and ``_ci_high`` (descriptor prompts; a percentile
        bootstrap over clusters, :mod:`scd.eval.benchmarks.clusters`), ``bias_n`` and
        ``bias_templates`` (the clusters), ``bias_wilson_ci_low`` / ``_high`` (the interval that
        treats prompts as independent), ``bias_change_pts`` with ``bias_change_ci_low`` /
        ``_high`` and ``bias_p`` (the arm minus the base model on the same prompts, points;
        cluster bootstrap interval and two-sided exact sign-flip p), ``bias_p_other`` (the same
        test over the other unit's clusters), ``bias_informative`` (the clusters whose count
        changed) and ``bias_min_p`` (the smallest p they allow), ``bias_mcnemar_p`` (exact
        McNemar, paired by prompt), ``bias_to_unbiased`` and ``bias_to_biased`` (the discordant
        pairs: biased in the base model, not in the arm; the reverse), ``baseline_pct,
        baseline_ci_low, baseline_ci_high, baseline_n`` (the descriptor-free baselines, one or
        a few per cell: Wilson), ``descriptor_effect_pts`` with ``descriptor_effect_ci_low``
        and ``_ci_high`` (bias - baseline, points; None without baselines; the interval over
        the clusters), and ``tendency_<scale>_<first option>_pct`` per scale. Percentages in
        points, unrounded; 95% intervals.
    """
    ids = {r["prompt_id"] for r in read_records(Path(items) / "records.jsonl")}
    arm, ref = _frame(result, ids), _frame(base, ids)
    desc, baseline = arm[~arm["baseline"]], arm[arm["baseline"]]
    ref_desc = ref[~ref["baseline"]]
    bias, base_rate = bias_rate(desc, "all"), bias_rate(baseline, "all")
    test = mcnemar_pair(
        desc.set_index("prompt_id")["biased"], ref_desc.set_index("prompt_id")["biased"]
    )
    effect = descriptor_effect(desc, baseline, unit)
    clustered = cluster_rate(desc["biased"].tolist(), _clusters(desc, unit))
    cells = list(unit_keys("cell"))
    both = desc[["prompt_id", "biased", *cells]].merge(
        ref_desc[["prompt_id", "biased"]], on="prompt_id", suffixes=("", "_base")
    )
    after, before = both["biased"].tolist(), both["biased_base"].tolist()
    change = cluster_change(after, before, _clusters(both, unit))
    other = "cell" if unit == "template" else "template"
    other_p = cluster_change(after, before, _clusters(both, other))["p"]
    return {
        "bias_pct": finite(bias["pct"]),
        "bias_ci_low": finite(clustered["ci_low"]),
        "bias_ci_high": finite(clustered["ci_high"]),
        "bias_n": bias["n"],
        "bias_templates": clustered["clusters"],
        "bias_wilson_ci_low": finite(bias["ci_low"]),
        "bias_wilson_ci_high": finite(bias["ci_high"]),
        "bias_change_pts": finite(change["pts"]),
        "bias_change_ci_low": finite(change["ci_low"]),
        "bias_change_ci_high": finite(change["ci_high"]),
        "bias_p": change["p"],
        "bias_p_other": other_p,
        "bias_informative": change["informative"],
        "bias_min_p": change["min_p"],
        "bias_mcnemar_p": test["p"],
        "bias_to_unbiased": test["to_false"],
        "bias_to_biased": test["to_true"],
        "baseline_pct": finite(base_rate["pct"]),
        "baseline_ci_low": finite(base_rate["ci_low"]),
        "baseline_ci_high": finite(base_rate["ci_high"]),
        "baseline_n": base_rate["n"],
        "descriptor_effect_pts": finite(effect[0]),
        "descriptor_effect_ci_low": finite(effect[1]),
        "descriptor_effect_ci_high": finite(effect[2]),
        **_tendency(desc),
    }


FLIP_COLUMNS = ("prompt_id", "principle", "scenario", "scale", "contact", "axis", "descriptor")


def bias_flips(result: Path | str, base: Path | str, items: Path | str) -> pd.DataFrame:
    """The descriptor prompts of ``items`` whose chosen answer differs between ``base`` (before)
    and ``result`` (after): :data:`FLIP_COLUMNS`, ``before`` / ``after`` (the answers) and
    ``biased_before`` / ``biased_after``, in prompt order."""
    ids = {r["prompt_id"] for r in read_records(Path(items) / "records.jsonl")}
    after, before = _frame(result, ids), _frame(base, ids)
    after, before = after[~after["baseline"]], before[~before["baseline"]]
    keep = [c for c in FLIP_COLUMNS if c in after]
    both = after[[*keep, "chosen", "biased"]].merge(
        before[["prompt_id", "chosen", "biased"]], on="prompt_id", suffixes=("_after", "_before")
    )
    changed = both[both["chosen_after"].fillna("") != both["chosen_before"].fillna("")]
    out = changed.rename(columns={"chosen_before": "before", "chosen_after": "after"})
    columns = [*keep, "before", "after", "biased_before", "biased_after"]
    return out[columns].sort_values("prompt_id").reset_index(drop=True)
