"""Rates and paired changes whose items come in clusters: prompts written from one template are
not independent of one another (one template's wording can move all of its prompts), so a Wilson
interval or a McNemar test over prompts, which treat them as independent, is too narrow.

- **Intervals**: a percentile bootstrap (``scipy.stats.bootstrap``) that resamples whole
  clusters, each resample pooling its clusters' items. A rate with no true item (or no false
  one) has no spread to resample: its interval is Wilson's with one observation per cluster
  (each cluster counted once -- the smallest sample the items can stand for), never [0, 0].
- **Tests**: an exact sign-flip test over clusters (:func:`sign_flip_test`). For an arm against
  the base model on the same items, ``d_c`` is cluster c's difference of counts (arm - base).
  Under the null of no effect each ``d_c`` is symmetric about 0, so ``T = sum(d_c)`` is as likely
  as ``sum(s_c d_c)`` for every sign vector ``s``; the p-value is the share of the ``2^C`` sign
  vectors at least as extreme. Clusters with ``d_c = 0`` add nothing, and with ``k`` clusters
  that differ the smallest two-sided p is ``2 / 2^k`` (reported as ``min_p``): 7 informative
  clusters cannot give less than 0.016. (A bootstrap's tail beyond 0 is not a test: with few
  informative clusters twice it is anti-conservative.) The null distribution of integer counts
  is computed exactly by convolution, for any number of clusters; ``tests/eval/
  test_clusters.py`` checks it against ``scipy.stats.permutation_test`` and on simulated nulls.

The cluster **unit** (:data:`UNITS`) is the template by default -- principle x scenario, both
actions and every scale together, since one template's wording is shared by all of them -- or
the template cell (principle, scenario, action, scale); the two can disagree, and which is right
depends on where the shared cause sits, so the arena shows the other unit's p beside.

Why not a model with template effects (a GEE or a mixed logistic model in statsmodels): a tuned
arm often answers without a single biased answer (0%), where a logistic model's estimate
diverges, and the sign-flip test needs no model of how a template shifts the rate.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np

__all__ = [
    "RESAMPLES",
    "SEED",
    "UNITS",
    "cluster_change",
    "cluster_rate",
    "sign_flip_test",
    "unit_keys",
]

RESAMPLES = 2000
SEED = 0
Unit = Literal["template", "cell"]
UNITS: dict[str, str] = {  # a cluster unit -> what it is, as a table names it
    "template": "templates (principle x scenario)",
    "cell": "template cells (principle x scenario x action x scale)",
}
_KEYS = {
    "template": ("principle", "scenario"),
    "cell": ("principle", "scenario", "action", "scale"),
}
Alternative = Literal["two-sided", "less", "greater"]


def unit_keys(unit: str) -> tuple[str, ...]:
    """The columns of a prompt row that name its cluster under ``unit``.

    Raises:
        ValueError: an unknown unit.
    """
    if unit not in _KEYS:
        raise ValueError(f"cluster unit {unit!r}: expected {' or '.join(_KEYS)}")
    return _KEYS[unit]


def _sums(clusters: Sequence[Hashable], *columns: Sequence[float]) -> list[np.ndarray]:
    """Per cluster (in first-seen order) the sum of each column, and the item count last."""
    index: dict[Hashable, int] = {}
    ids = np.array([index.setdefault(c, len(index)) for c in clusters], dtype=int)
    sums = [
        np.bincount(ids, weights=np.asarray(col, dtype=float), minlength=len(index))
        for col in columns
    ]
    return [*sums, np.bincount(ids, minlength=len(index)).astype(float)]


def sign_flip_test(diffs: Sequence[int], alternative: Alternative = "two-sided") -> dict[str, Any]:
    """The exact sign-flip test of ``sum(diffs)`` (integer per-cluster differences; see the
    module docstring): ``{p, informative, min_p}`` -- the p-value (two-sided: the share of sign
    vectors with ``|T*| >= |T|``; ``less``: ``T* <= T``; ``greater``: ``T* >= T``), the
    clusters that differ, and the smallest p the test can give with them (1.0 with none).

    Raises:
        ValueError: a difference that is not a whole number.
    """
    d = np.asarray(diffs, dtype=float)
    if not np.all(d == np.round(d)):
        raise ValueError("sign_flip_test: per-cluster differences must be whole counts")
    d = np.abs(d[d != 0]).astype(np.int64)
    observed = int(np.round(np.sum(diffs)))
    if len(d) == 0:
        return {"p": 1.0, "informative": 0, "min_p": 1.0}
    total = int(d.sum())
    dist = np.zeros(2 * total + 1)  # P(T* = t) at index t + total
    dist[total] = 1.0
    for x in d:  # each cluster adds +x or -x with probability 1/2
        dist = 0.5 * (np.roll(dist, x) + np.roll(dist, -x))
    values = np.arange(-total, total + 1)
    tail = {
        "two-sided": np.abs(values) >= abs(observed),
        "less": values <= observed,
        "greater": values >= observed,
    }[alternative]
    p = float(min(1.0, dist[tail].sum()))
    smallest = 2.0 ** (1 - len(d)) if alternative == "two-sided" else 2.0 ** -len(d)
    return {"p": p, "informative": len(d), "min_p": min(1.0, smallest)}


def _wilson(k: float, n: int) -> tuple[float, float]:
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return 100.0 * float(low), 100.0 * float(high)


def cluster_rate(
    flags: Sequence[bool], clusters: Sequence[Hashable], *, resamples: int = RESAMPLES
) -> dict[str, Any]:
    """The share of ``flags`` that are true, in %, with its 95% interval over ``clusters``
    (``{pct, ci_low, ci_high, n, clusters}``): a percentile bootstrap; with no true item or no
    false one, Wilson's over one observation per cluster; with one cluster, None; everything
    None with no items."""
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
    elif len(size) > 1:  # all true or all false: each cluster counts once
        low, high = _wilson(len(size) if k.sum() else 0, len(size))
    return {"pct": float(pct), "ci_low": low, "ci_high": high, "n": n, "clusters": len(size)}


def cluster_change(
    after: Sequence[bool],
    before: Sequence[bool],
    clusters: Sequence[Hashable],
    *,
    resamples: int = RESAMPLES,
    alternative: Alternative = "two-sided",
) -> dict[str, Any]:
    """The change of a rate between two results on the same items (``after[i]`` and
    ``before[i]`` are one item's), in points, with its 95% percentile bootstrap interval over
    ``clusters`` and the exact sign-flip test over them (:func:`sign_flip_test`;
    ``alternative``: ``less`` tests a fall): ``{pts, ci_low, ci_high, p, n, clusters,
    informative, min_p}``."""
    from scipy import stats

    n = len(after)
    if n == 0:
        return {
            "pts": None,
            "ci_low": None,
            "ci_high": None,
            "p": None,
            "n": 0,
            "clusters": 0,
            "informative": 0,
            "min_p": None,
        }
    a, b, size = _sums(clusters, after, before)
    pts = 100.0 * (a.sum() - b.sum()) / size.sum()
    test = sign_flip_test((a - b).round().astype(int), alternative)
    low = high = pts if test["informative"] == 0 else None
    if len(size) > 1 and test["informative"]:
        res = stats.bootstrap(
            (a, b, size),
            lambda x, y, m, axis=-1: 100.0 * (x.sum(axis) - y.sum(axis)) / m.sum(axis),
            paired=True,
            n_resamples=resamples,
            method="percentile",
            rng=np.random.default_rng(SEED),
        )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {
        "pts": float(pts),
        "ci_low": low,
        "ci_high": high,
        "n": n,
        "clusters": len(size),
        **test,
    }
