"""Rates and paired changes whose items come in clusters: prompts written from one template are
not independent of one another, so a Wilson interval or a McNemar test over prompts, which treat
them as independent, is too narrow. Here the clusters (template cells) are resampled whole: a
percentile bootstrap (scipy.stats.bootstrap) over clusters, each resample pooling its clusters'
items -- the interval of a rate, and of the paired change of a rate between two results on the
same items with a two-sided bootstrap p-value.

Why a cluster bootstrap and not a model with template effects (a GEE or a mixed logistic model in
statsmodels): a tuned arm often answers without a single biased answer (0%), where a logistic
model's estimate diverges, and the bootstrap needs no model of how a template shifts the rate.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["RESAMPLES", "SEED", "cluster_change", "cluster_rate"]

RESAMPLES = 2000
SEED = 0


def _sums(clusters: Sequence[Hashable], *columns: Sequence[float]) -> list[np.ndarray]:
    """Per cluster (in first-seen order) the sum of each column, and the item count last."""
    index: dict[Hashable, int] = {}
    ids = np.array([index.setdefault(c, len(index)) for c in clusters], dtype=int)
    sums = [
        np.bincount(ids, weights=np.asarray(col, dtype=float), minlength=len(index))
        for col in columns
    ]
    return [*sums, np.bincount(ids, minlength=len(index)).astype(float)]


def cluster_rate(
    flags: Sequence[bool], clusters: Sequence[Hashable], *, resamples: int = RESAMPLES
) -> dict[str, Any]:
    """The share of ``flags`` that are true, in %, with its 95% percentile bootstrap interval
    over ``clusters`` (``{pct, ci_low, ci_high, n, clusters}``; the interval is None with fewer
    than two clusters, everything with no items)."""
    from scipy import stats

    n = len(flags)
    if n == 0:
        return {"pct": None, "ci_low": None, "ci_high": None, "n": 0, "clusters": 0}
    k, size = _sums(clusters, flags)
    pct = 100.0 * k.sum() / size.sum()
    low = high = None
    if len(size) > 1 and 0 < k.sum() < size.sum():
        res = stats.bootstrap(
            (k, size),
            lambda a, b, axis=-1: 100.0 * a.sum(axis) / b.sum(axis),
            paired=True,
            n_resamples=resamples,
            method="percentile",
            rng=np.random.default_rng(SEED),
        )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    elif len(size) > 1:  # all true or all false: every resample says the same
        low = high = pct
    return {"pct": float(pct), "ci_low": low, "ci_high": high, "n": n, "clusters": len(size)}


def cluster_change(
    after: Sequence[bool],
    before: Sequence[bool],
    clusters: Sequence[Hashable],
    *,
    resamples: int = RESAMPLES,
) -> dict[str, Any]:
    """The change of a rate between two results on the same items (``after[i]`` and
    ``before[i]`` are one item's), in points, with its 95% percentile bootstrap interval over
    ``clusters`` and a two-sided bootstrap p-value (twice the share of resamples on the far side
    of 0, at least 1 / (resamples + 1)): ``{pts, ci_low, ci_high, p, n, clusters}``."""
    from scipy import stats

    n = len(after)
    if n == 0:
        return {"pts": None, "ci_low": None, "ci_high": None, "p": None, "n": 0, "clusters": 0}
    a, b, size = _sums(clusters, after, before)
    pts = 100.0 * (a.sum() - b.sum()) / size.sum()
    if len(size) < 2 or np.array_equal(a, b):
        p = 1.0 if np.array_equal(a, b) else None
        return {
            "pts": float(pts),
            "ci_low": pts if p else None,
            "ci_high": pts if p else None,
            "p": p,
            "n": n,
            "clusters": len(size),
        }
    res = stats.bootstrap(
        (a, b, size),
        lambda x, y, m, axis=-1: 100.0 * (x.sum(axis) - y.sum(axis)) / m.sum(axis),
        paired=True,
        n_resamples=resamples,
        method="percentile",
        rng=np.random.default_rng(SEED),
    )
    dist = res.bootstrap_distribution
    far = min((dist <= 0).sum(), (dist >= 0).sum())
    p = min(1.0, max(2.0 * far / resamples, 1.0 / (resamples + 1)))
    return {
        "pts": float(pts),
        "ci_low": float(res.confidence_interval.low),
        "ci_high": float(res.confidence_interval.high),
        "p": float(p),
        "n": n,
        "clusters": len(size),
    }
