"""Statistics of the stigma probes (engine-free, numpy/scipy/statsmodels).

Choices, and why:

- **Gap stigmatized - non-stigmatized** (Mei et al. 2023, section 5.1): the difference of the mean
  per-condition scores of the two groups. Its 95% CI is a BCa bootstrap over *conditions*
  (``scipy.stats.bootstrap``, two independent samples resampled separately, 9,999 resamples,
  fixed seed): conditions are the units of the comparison (93 vs 29, unequal sizes, bounded
  and often skewed probabilities), and resampling prompts instead would treat the 28 prompts of
  one condition as independent evidence. The Welch t-test p-value (no equal-variance
  assumption) is reported beside it for readers who expect a parametric test.
- **Mental vs physical** (Mina et al. 2024, section 3.1 and Table 2): Wilcoxon signed-rank test
  (``scipy.stats.wilcoxon``, two-sided) on pairs matched by sentence frame (item x noun phrase):
  the mean score of the mental illnesses vs the mean of the physical ones in the same frame.
  The per-dimension p-values get a Bonferroni correction over the 9 dimensions
  (``statsmodels`` ``multipletests``); the overall test is not corrected (as in Table 2). A
  frame whose two means agree within the scores' precision (``numpy.isclose``, 1e-5 nats or
  1e-6 of their size: scd's engines agree with a one-sequence forward to about that) counts
  as a tie, which the test drops, rather than as a difference of float rounding.
- **Cronbach's alpha** per dimension (Mina et al. 2024, section 3.1, mental illnesses only): the
  dimension's items are the columns, each (noun phrase, mental illness) an observation;
  ``alpha = k/(k-1) * (1 - sum(item variances) / variance(row sums))`` (sample variances).
- **Pearson r** (Mei et al. 2023, section 5.3) between two per-condition bias measures
  (``scipy.stats.pearsonr``, 95% CI by Fisher's z), and **Spearman's rho** beside it
  (``scipy.stats.spearmanr``; 95% CI by Fisher's z with the Bonett & Wright (2000) standard error
  ``sqrt((1 + rho^2 / 2) / (n - 3))``): the rank correlation does not assume a linear relation
  between a probability and a proportion, nor lean on a few extreme conditions.
- **A pooled mean** (Mei et al. 2023, section 5.1: a condition's mean over 6 models x 4
  templates) gets a 95% BCa bootstrap CI over its pooled values (:func:`mean_ci`): it says how
  much the mean depends on which models and templates were pooled, not how a model would answer
  new prompts.
- **P(negative attitude)** of a fill-mask prediction (Mei et al. 2023, section 4.3): summed
  probability of negative words over that of positive, negative and neutral words; irrelevant
  and unrated words are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

# numpy and scipy.stats are imported by the functions that use them: scipy.stats takes about a
# second, numpy a tenth, which every `scd` command would pay (the CLI imports each benchmark for
# its options)
if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ATTITUDES",
    "cronbach_alpha",
    "gap",
    "mean_ci",
    "mental_vs_physical",
    "p_negative",
    "pearson",
    "spearman",
]

ATTITUDES = ("positive", "negative", "neutral", "irrelevant")
N_RESAMPLES = 9999
TIE_ATOL, TIE_RTOL = 1e-5, 1e-6  # nats: a frame's mental and physical means closer are a tie


def p_negative(mass: dict[str, float]) -> float | None:
    """``neg / (pos + neg + neu)`` of summed word probabilities; None when none are rated."""
    den = mass.get("positive", 0.0) + mass.get("negative", 0.0) + mass.get("neutral", 0.0)
    return mass.get("negative", 0.0) / den if den > 0 else None


def _mean_diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    import numpy as np

    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def _bootstrap_ci(samples: tuple[np.ndarray, ...], statistic: Any, seed: int) -> tuple:
    """A 95% BCa bootstrap interval (percentile where BCa degenerates)."""
    import numpy as np
    from scipy import stats

    for method in ("BCa", "percentile"):
        rng = np.random.default_rng(seed)
        res = stats.bootstrap(samples, statistic, n_resamples=N_RESAMPLES, method=method, rng=rng)
        low, high = res.confidence_interval
        if np.isfinite(low) and np.isfinite(high):
            break
    return float(low), float(high)


def mean_ci(values: Sequence[float | None], seed: int = 0) -> dict[str, Any]:
    """The mean of ``values`` (None left out) with its 95% BCa bootstrap CI: ``{mean, ci_low,
    ci_high, n}``; the interval is the mean itself when the values do not vary, None below 2."""
    import numpy as np

    a = np.asarray([v for v in values if v is not None], dtype=float)
    mean = float(a.mean()) if a.size else None
    out = {"mean": mean, "ci_low": None, "ci_high": None, "n": int(a.size)}
    if a.size >= 2:
        low, high = (mean, mean) if np.ptp(a) == 0 else _bootstrap_ci((a,), np.mean, seed)
        out.update(ci_low=low, ci_high=high)
    return out


def gap(x: Sequence[float], y: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """Mean(x) - mean(y) with a BCa bootstrap 95% CI and the Welch t-test p-value.

    Args:
        x: Per-condition scores of the stigmatized conditions.
        y: Per-condition scores of the non-stigmatized conditions.
        seed: Seed of the bootstrap resampling.

    Returns:
        ``{mean_x, mean_y, gap, ci_low, ci_high, p_welch, n_x, n_y}``; None where undefined
        (fewer than 2 values in a group).
    """
    import numpy as np
    from scipy import stats

    a = np.asarray([v for v in x if v is not None], dtype=float)
    b = np.asarray([v for v in y if v is not None], dtype=float)
    out: dict[str, Any] = {
        "mean_x": float(a.mean()) if a.size else None,
        "mean_y": float(b.mean()) if b.size else None,
        "gap": float(_mean_diff(a, b)) if a.size and b.size else None,
        "ci_low": None,
        "ci_high": None,
        "p_welch": None,
        "n_x": int(a.size),
        "n_y": int(b.size),
    }
    if a.size < 2 or b.size < 2:
        return out
    if np.ptp(a) == 0 and np.ptp(b) == 0:  # no spread to resample; Welch t undefined
        out.update(ci_low=out["gap"], ci_high=out["gap"], p_welch=1.0 if out["gap"] == 0 else None)
        return out
    low, high = _bootstrap_ci((a, b), _mean_diff, seed)
    p = stats.ttest_ind(a, b, equal_var=False).pvalue
    out.update(ci_low=low, ci_high=high, p_welch=float(p))
    return out


def cronbach_alpha(scores: np.ndarray) -> float | None:
    """Cronbach's alpha of an ``observations x items`` matrix (None if undefined)."""
    import numpy as np

    m = np.asarray(scores, dtype=float)
    if m.ndim != 2 or m.shape[1] < 2 or m.shape[0] < 2:
        return None
    k = m.shape[1]
    total = m.sum(axis=1).var(ddof=1)
    if total == 0:
        return None
    return float(k / (k - 1) * (1 - m.var(axis=0, ddof=1).sum() / total))


def _wilcoxon(mental: np.ndarray, physical: np.ndarray) -> dict[str, Any]:
    import numpy as np
    from scipy import stats

    diff = mental - physical
    # a pair within the scores' own precision is a tie: a float32 sum's rounding moves with the
    # names' token counts, and a rank test would read that as a consistent difference
    tied = np.isclose(mental, physical, rtol=TIE_RTOL, atol=TIE_ATOL)
    tested = np.where(tied, 0.0, diff)
    out = {
        "n": int(diff.size),
        "mean_mental": float(mental.mean()) if diff.size else None,
        "mean_physical": float(physical.mean()) if diff.size else None,
        "mean_diff": float(diff.mean()) if diff.size else None,
        "median_diff": float(np.median(diff)) if diff.size else None,
        "statistic": None,
        "p": None,
    }
    if tested.size and np.any(tested != 0):
        res = stats.wilcoxon(tested)
        out.update(statistic=float(res.statistic), p=float(res.pvalue))
    return out


def mental_vs_physical(
    frames: Sequence[dict[str, Any]], dimensions: Sequence[str]
) -> dict[str, Any]:
    """Wilcoxon tests (overall and per dimension, Bonferroni) and Cronbach's alpha.

    Args:
        frames: One dict per sentence frame: ``dimension``, ``item``, ``noun_phrase`` and
            ``scores`` {"mental": {illness: score}, "physical": {illness: score}}.
        dimensions: The dimensions, in display order.

    Returns:
        ``{"overall": test, "dimensions": {dim: test + p_bonferroni + alpha + n_items}}`` where
        a test is ``{n, mean_mental, mean_physical, mean_diff, median_diff, statistic, p}``.
    """
    import numpy as np
    from statsmodels.stats.multitest import multipletests

    def pairs(sub: Sequence[dict]) -> tuple[np.ndarray, np.ndarray]:
        ok = [f for f in sub if f["scores"]["mental"] and f["scores"]["physical"]]
        mental = np.array([np.mean(list(f["scores"]["mental"].values())) for f in ok])
        physical = np.array([np.mean(list(f["scores"]["physical"].values())) for f in ok])
        return mental, physical

    out: dict[str, Any] = {"overall": _wilcoxon(*pairs(frames)), "dimensions": {}}
    for dim in dimensions:
        sub = [f for f in frames if f["dimension"] == dim]
        out["dimensions"][dim] = {**_wilcoxon(*pairs(sub)), "alpha": _alpha(sub)}
        out["dimensions"][dim]["n_items"] = len({f["item"] for f in sub})
    tested = [d for d, r in out["dimensions"].items() if r["p"] is not None]
    if tested:
        adjusted = multipletests([out["dimensions"][d]["p"] for d in tested], method="bonferroni")
        for d, p in zip(tested, adjusted[1]):
            out["dimensions"][d]["p_bonferroni"] = float(p)
    for r in out["dimensions"].values():
        r.setdefault("p_bonferroni", None)
    out["n_tests_corrected"] = len(tested)
    return out


def _alpha(frames: Sequence[dict[str, Any]]) -> float | None:
    """Alpha over the mental illnesses: items are columns, (noun phrase, illness) rows."""
    import numpy as np

    items = sorted({f["item"] for f in frames})
    cells: dict[tuple[str, str], dict[int, float]] = {}
    for f in frames:
        for illness, score in f["scores"]["mental"].items():
            cells.setdefault((f["noun_phrase"], illness), {})[f["item"]] = score
    rows = [[c[i] for i in items] for c in cells.values() if len(c) == len(items)]
    return cronbach_alpha(np.array(rows)) if rows else None


def pearson(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Pearson r with its two-sided p-value and 95% CI (Fisher z); None where undefined."""
    import numpy as np
    from scipy import stats

    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"r": None, "p": None, "ci_low": None, "ci_high": None, "n": int(a.size)}
    res = stats.pearsonr(a, b)
    ci = res.confidence_interval(0.95)
    return {
        "r": float(res.statistic),
        "p": float(res.pvalue),
        "ci_low": float(ci.low),
        "ci_high": float(ci.high),
        "n": int(a.size),
    }


def spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Spearman's rho with its two-sided p-value and 95% CI (Fisher z, Bonett-Wright standard
    error); None where undefined."""
    import numpy as np
    from scipy import stats

    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 4 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"rho": None, "p": None, "ci_low": None, "ci_high": None, "n": int(a.size)}
    res = stats.spearmanr(a, b)
    rho = float(res.statistic)
    z, se = np.arctanh(min(max(rho, -0.999999), 0.999999)), np.sqrt((1 + rho**2 / 2) / (a.size - 3))
    half = stats.norm.ppf(0.975) * se
    return {
        "rho": rho,
        "p": float(res.pvalue),
        "ci_low": float(np.tanh(z - half)),
        "ci_high": float(np.tanh(z + half)),
        "n": int(a.size),
    }
