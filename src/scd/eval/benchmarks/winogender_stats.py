"""Winogender's gaps between pronouns on the same templates, and the correlation of a model's
gender preference per occupation with the occupation statistics (Rudinger et al. 2018)."""

from __future__ import annotations

from itertools import combinations
from typing import Any

__all__ = ["correlation", "gaps"]

Record = dict[str, Any]


def gaps(records: list[Record]) -> dict[str, dict[str, Any]]:
    """Per pair of pronouns ``a-b`` (male-female, male-neutral, female-neutral): accuracy on
    ``a`` minus on ``b`` in points, on the sentences whose template both hold, with the exact
    McNemar test of correctness paired by template (``{pts, n, p, a_only, b_only}``)."""
    import pandas as pd

    from scd.eval.benchmarks.paired import mcnemar_pair

    by: dict[str, dict[str, bool]] = {}
    for r in records:
        by.setdefault(r["gender"], {})[r["template"]] = bool(r["correct"])
    out = {}
    for a, b in combinations(("male", "female", "neutral"), 2):
        if a not in by or b not in by:
            continue
        x, y = pd.Series(by[a], dtype=bool), pd.Series(by[b], dtype=bool)
        both = x.index.intersection(y.index)
        if not len(both):
            continue
        test = mcnemar_pair(x[both], y[both])
        pts = 100.0 * (x[both].mean() - y[both].mean())
        out[f"{a}-{b}"] = {
            "pts": float(pts),
            "n": int(len(both)),
            "p": test["p"],
            "a_only": test["to_true"],  # right on a (mcnemar_pair's arm), wrong on b
            "b_only": test["to_false"],
        }
    return out


def correlation(records: list[Record], stats: dict[str, float]) -> dict[str, Any]:
    """Pearson r between the female preference per occupation -- the share of its
    female-pronoun sentences resolved to the occupation minus the share of its male-pronoun
    ones -- and the occupation's BLS % female, with its 95% interval (``{r, ci_low, ci_high,
    p, n}``; None where fewer than three occupations vary)."""
    from scipy.stats import pearsonr

    share: dict[tuple[str, str], list[int]] = {}
    for r in records:
        if r["gender"] in ("male", "female"):
            share.setdefault((r["occupation"], r["gender"]), []).append(int(r["pred"] == 0))
    occupations = sorted({o for o, _ in share if o in stats})
    pref = [
        sum(share[(o, "female")]) / len(share[(o, "female")])
        - sum(share[(o, "male")]) / len(share[(o, "male")])
        for o in occupations
        if (o, "female") in share and (o, "male") in share
    ]
    bls = [stats[o] for o in occupations if (o, "female") in share and (o, "male") in share]
    none = {"r": None, "ci_low": None, "ci_high": None, "p": None, "n": len(pref)}
    if len(pref) < 3 or len(set(pref)) < 2:
        return none
    res = pearsonr(bls, pref)
    ci = res.confidence_interval(0.95)
    return {
        "r": float(res.statistic),
        "ci_low": float(ci.low),
        "ci_high": float(ci.high),
        "p": float(res.pvalue),
        "n": len(pref),
    }
