"""The SCM audit's numbers, tables and figure: warmth and competence per illness type (means with
95% t intervals, quadrant shares), Mann-Whitney U tests mental vs physical on each axis, the
density plot of Mina et al. (2024, Figure 3), and the BIAS map (their Table 1) with the corpus's
shares beside a model's AQ-27 results."""

from __future__ import annotations

import io
from importlib.resources import files
from typing import Any

import numpy as np
import yaml

__all__ = ["QUADRANTS", "audit_markdown", "bias_map", "density_png", "summarize_scores"]

QUADRANTS = ("HW/HC", "HW/LC", "LW/HC", "LW/LC")  # high/low warmth, high/low competence (>= 0)
COLORS = {"mental": "#c0392b", "physical": "#2e6fb7"}  # the paper's red and blue


def _axis(values: np.ndarray) -> dict[str, Any]:
    from scipy import stats

    n = len(values)
    mean = float(np.mean(values)) if n else None
    low = high = None
    if n > 1:
        low, high = (float(x) for x in stats.t.interval(0.95, n - 1, mean, stats.sem(values)))
    return {
        "n": n,
        "mean": mean,
        "ci_low": low,
        "ci_high": high,
        "median": float(np.median(values)) if n else None,
    }


def quadrant_shares(warmth: np.ndarray, competence: np.ndarray) -> dict[str, float | None]:
    """Share of sentences in each quadrant (0 counts as high)."""
    n = len(warmth)
    hw, hc = warmth >= 0, competence >= 0
    masks = {"HW/HC": hw & hc, "HW/LC": hw & ~hc, "LW/HC": ~hw & hc, "LW/LC": ~hw & ~hc}
    return {q: float(m.sum() / n) if n else None for q, m in masks.items()}


def _compare(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """Two-sided Mann-Whitney U of ``a`` vs ``b``, with the rank-biserial correlation."""
    from scipy.stats import mannwhitneyu

    if len(a) == 0 or len(b) == 0:
        return {"u": None, "p": None, "rank_biserial": None}
    test = mannwhitneyu(a, b, alternative="two-sided")
    u = float(test.statistic)
    return {"u": u, "p": float(test.pvalue), "rank_biserial": 2 * u / (len(a) * len(b)) - 1}


def summarize_scores(scores: dict[str, np.ndarray]) -> dict[str, Any]:
    """``scores``: illness type -> ``(n, 2)`` warmth, competence of its sentences."""
    out: dict[str, Any] = {"types": {}}
    for kind, s in scores.items():
        out["types"][kind] = {
            "n": len(s),
            "warmth": _axis(s[:, 0]),
            "competence": _axis(s[:, 1]),
            "quadrants": quadrant_shares(s[:, 0], s[:, 1]),
        }
    if {"mental", "physical"} <= set(scores):
        m, p = scores["mental"], scores["physical"]
        out["mental_vs_physical"] = {
            axis: _compare(m[:, i], p[:, i]) for i, axis in enumerate(("warmth", "competence"))
        }
    return out


def bias_map() -> dict[str, dict[str, str]]:
    """Table 1 of Mina et al. 2024: AQ-27 dimension -> expected warmth and competence."""
    return yaml.safe_load(files("scd.audit").joinpath("data/bias_map.yaml").read_text())


def _share_in(s: np.ndarray, need: dict[str, str]) -> float | None:
    """Share of sentences in a BIAS-map region: its warmth, and its competence unless "any..."."""
    if len(s) == 0:
        return None
    keep = (s[:, 0] < 0) if need["warmth"] == "low" else (s[:, 0] >= 0)
    if need["competence"] in ("low", "high"):
        keep &= (s[:, 1] < 0) if need["competence"] == "low" else (s[:, 1] >= 0)
    return float(keep.mean())


def bias_map_rows(scores: dict[str, np.ndarray], aq27: dict[str, Any] | None) -> list[dict]:
    """Per AQ-27 dimension: the BIAS map's region, the corpus's share of mental and physical
    sentences in it, and the model's AQ-27 mental - physical difference (if given)."""
    rows = []
    for dim, need in bias_map().items():
        mental = _share_in(scores.get("mental", np.zeros((0, 2))), need)
        physical = _share_in(scores.get("physical", np.zeros((0, 2))), need)
        model = (aq27 or {}).get("dimensions", {}).get(dim, {})
        rows.append(
            {
                "dimension": dim,
                **need,
                "mental_share": mental,
                "physical_share": physical,
                "share_diff": None if mental is None or physical is None else mental - physical,
                "aq27_mean_diff": model.get("mean_diff"),
                "aq27_p": model.get("p_bonferroni"),
            }
        )
    return rows


def density_png(scores: dict[str, np.ndarray], title: str) -> bytes:
    """Figure 3 of Mina et al. 2024: warmth x competence densities (contours of a Gaussian
    KDE) per illness type over a scatter of the sentences."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from scipy.stats import gaussian_kde

    fig = Figure(figsize=(5.6, 5.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    every = np.concatenate([s for s in scores.values() if len(s)] or [np.zeros((1, 2))])
    lim = max(1.0, float(np.abs(every).max()) * 1.05)
    grid = np.mgrid[-lim:lim:120j, -lim:lim:120j]
    for kind, s in scores.items():
        color = COLORS.get(kind, "#555555")
        ax.scatter(s[:, 0], s[:, 1], s=6, alpha=0.35, color=color, label=f"{kind} (n={len(s)})")
        if len(s) > 2:
            try:
                kde = gaussian_kde(s.T)
            except np.linalg.LinAlgError:  # all points on a line: no density to draw
                continue
            density = kde(grid.reshape(2, -1)).reshape(grid.shape[1:])
            ax.contour(grid[0], grid[1], density, levels=5, colors=color, linewidths=0.9)
    ax.axhline(0, color="#999999", lw=0.6)
    ax.axvline(0, color="#999999", lw=0.6)
    ax.set(xlim=(-lim, lim), ylim=(-lim, lim), xlabel="warmth", ylabel="competence", title=title)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    return buf.getvalue()


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "–" if x is None else format(x, fmt)


def audit_markdown(summary: dict[str, Any]) -> str:
    """``tables.md`` of an audit run."""
    run, lines = summary["run"], []
    lines += [
        f"# SCM audit: {run['corpus']}",
        "",
        f"Encoder {run['encoder']}; {summary['n_documents']:,} documents, "
        f"{summary['n_sentences']:,} sentences, {summary['n_matched']:,} mention an illness term "
        "(a sentence naming both types counts in both). Warmth and competence: the axis-rotated "
        "POLAR SCM model of Fraser et al. 2022 (0 counts as high).",
        "",
        "| Type | Sentences | Warmth [95% CI] | Competence [95% CI] | "
        + " | ".join(QUADRANTS)
        + " |",
        "|---|---|---|---|" + "---|" * len(QUADRANTS),
    ]
    for kind, t in summary["types"].items():
        axes = [
            f"{_f(t[a]['mean'])} [{_f(t[a]['ci_low'])}, {_f(t[a]['ci_high'])}]"
            for a in ("warmth", "competence")
        ]
        shares = [_f(t["quadrants"][q], ".1%") for q in QUADRANTS]
        lines.append(f"| {kind} | {t['n']:,} | {' | '.join(axes)} | {' | '.join(shares)} |")
    tests = summary.get("mental_vs_physical")
    if tests:
        lines += [
            "",
            "Mental vs physical, two-sided Mann-Whitney U: "
            + "; ".join(
                f"{axis} U = {_f(t['u'], '.1f')}, p = {_f(t['p'], '.3g')}, rank-biserial r = "
                f"{_f(t['rank_biserial'])}"
                for axis, t in tests.items()
            )
            + ".",
        ]
    lines += [
        "",
        "## The BIAS map",
        "",
        "Table 1 of Mina et al. 2024 (Cuddy et al. 2007): the warmth/competence region each AQ-27 "
        "dimension maps to; the corpus's share of mental and physical sentences in that region "
        '(for "any" competence: warmth alone); and the model\'s AQ-27 result (mental − physical '
        "score, Bonferroni p) when an `scd eval stigma --probe aq27` run is given.",
        "",
        "| Dimension | Warmth | Competence | Mental in region | Physical in region | "
        "Mental − physical | AQ-27 mental − physical | AQ-27 p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["bias_map"]:
        lines.append(
            f"| {r['dimension']} | {r['warmth']} | {r['competence']} | "
            f"{_f(r['mental_share'], '.1%')} | {_f(r['physical_share'], '.1%')} | "
            f"{_f(r['share_diff'], '+.1%')} | {_f(r['aq27_mean_diff'], '+.3f')} | "
            f"{_f(r['aq27_p'], '.3g')} |"
        )
    lines += ["", "![Warmth and competence densities](scm_density.png)", ""]
    return "\n".join(lines)
