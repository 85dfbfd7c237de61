"""What the arena's columns of several benchmarks share: an arm against the base model on the
same items (:meth:`scd.eval.benchmarks.base.Benchmark.arena`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from statsmodels.stats.contingency_tables import mcnemar

__all__ = ["finite", "mcnemar_pair"]


def finite(x: float | None) -> float | None:
    """``x`` as a float; None for None, NaN and infinities (values stay unrounded: a table
    rounds them once, as it shows them)."""
    return None if x is None or not np.isfinite(x) else float(x)


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
