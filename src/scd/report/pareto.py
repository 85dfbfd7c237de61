"""The arena's figure: each arm's fall in bias against its capability cost (KL from the base
model), the arms no other beats on both joined, an arm that lost its judgment hollow and off that
line (:func:`scd.report.arena.arena_section`)."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from scd.eval.benchmarks.plotting import checked_frame, display_label, png_bytes

__all__ = ["pareto_png"]


def pareto_png(frame: pd.DataFrame, title: str | None = None) -> bytes:
    """Bias reduction against capability cost, one point per arm with its intervals as error
    bars, the arms no other beats on both (less cost, more reduction) joined by a line.

    ``frame``: ``label``, ``cost``, ``cost_low``, ``cost_high``, ``gain``, ``gain_low``,
    ``gain_high`` (rows with no cost or gain are left out), and optionally ``kept``: an arm
    whose ``kept`` is false (it lost its judgment: not debiased) is drawn hollow, labelled so,
    and left off the frontier."""
    numbers = ["cost", "cost_low", "cost_high", "gain", "gain_low", "gain_high"]
    df = checked_frame(frame, "pareto figure", ["label"], numbers).dropna(subset=["cost", "gain"])
    if "kept" not in df:
        df = df.assign(kept=True)
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    colors = colormaps["tab10"]
    for i, r in enumerate(df.itertuples()):
        xerr = [[max(r.cost - r.cost_low, 0)], [max(r.cost_high - r.cost, 0)]]
        yerr = [[max(r.gain - r.gain_low, 0)], [max(r.gain_high - r.gain, 0)]]
        ax.errorbar(
            [r.cost],
            [r.gain],
            xerr=xerr,
            yerr=yerr,
            fmt="o",
            color=colors(i % 10),
            markerfacecolor=colors(i % 10) if r.kept else "white",
            capsize=3,
            markersize=6,
            label=display_label(r.label) + ("" if r.kept else " (judgment lost)"),
        )
    df = df[df["kept"].astype(bool)]
    ordered = df.sort_values(["cost", "gain"], ascending=[True, False])
    front, best = [], -math.inf
    for r in ordered.itertuples():
        if r.gain > best:
            front.append((r.cost, r.gain))
            best = r.gain
    if len(front) > 1:
        xs, ys = zip(*front)
        ax.plot(xs, ys, color="#707070", linewidth=1, linestyle="--", zorder=0)
    ax.axhline(0, color="#b0b0b0", linewidth=0.8)
    ax.set_xscale("symlog", linthresh=1e-3)  # 0 (the base model) and nats apart on one axis
    ax.set_xlim(-5e-4, max(df["cost_high"].fillna(df["cost"]).max(), 1e-2) * 2)
    ax.set_xlabel(
        "capability cost: mean KL from the base model on neutral prompts (nats, "
        "symmetric log scale)"
    )
    ax.set_ylabel("bias reduction on held-out prompts (points)")
    ax.grid(color="#e0e0e0", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=11)
    return png_bytes(fig)
