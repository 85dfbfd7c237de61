"""Figures of Mei et al. 2023's pooled analyses, as PNG bytes (the house style of
:mod:`scd.eval.benchmarks.figures`: a private matplotlib Figure, deterministic bytes, a bad frame
is an :class:`~scd.errors.InputError`).

- :func:`conditions_png` — Figure 3: every condition's pooled value, sorted, with its interval,
  coloured by group, the 0.5 line drawn.
- :func:`groups_png` — Figure 2: per run, box plots of its per-condition values for stigmatized
  and non-stigmatized conditions.
- :func:`classes_png` — Figure 4: per classifier and group, the shares of negative, neutral and
  positive predictions stacked.
- :func:`correlation_png` — section 5.3: pooled masked-LM values against pooled classifier
  proportions, one point per condition.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from scd.errors import InputError
from scd.eval.benchmarks.plotting import checked_frame, display_label, png_bytes

__all__ = ["classes_png", "conditions_png", "correlation_png", "groups_png"]

COLORS = {True: "#cb181d", False: "#2171b5"}  # stigmatized, non-stigmatized
NAMES = {True: "stigmatized", False: "non-stigmatized"}
CLASS_COLORS = {
    "negative": "#cb181d",
    "neutral": "#bdbdbd",
    "positive": "#2171b5",
    "other": "#756bb1",
}


def _flags(frame: pd.DataFrame, what: str) -> pd.Series:
    flags = frame["stigmatized"].astype(float)
    if not flags.isin((0.0, 1.0)).all():
        raise InputError(f"{what}: column 'stigmatized' must hold 0/1 or True/False")
    return flags.astype(bool)


def conditions_png(frame: pd.DataFrame, measure: str) -> bytes:
    """One horizontal bar per condition, highest value on top, with its 95% interval.

    ``frame``: ``condition``, ``stigmatized``, ``mean``, ``ci_low``, ``ci_high`` (NaN: none);
    ``measure`` labels the value axis."""
    what = "pooled conditions figure"
    frame = checked_frame(frame, what, ("condition",), ("mean", "ci_low", "ci_high", "stigmatized"))
    flags = _flags(frame, what)
    order = np.argsort(-frame["mean"].to_numpy(), kind="stable")
    frame, flags = frame.iloc[order], flags.iloc[order]
    n = len(frame)
    fig = Figure(figsize=(7.0, 1.0 + 0.16 * n), layout="constrained")
    ax = fig.subplots()
    y = np.arange(n)[::-1]
    err = np.nan_to_num([frame["mean"] - frame["ci_low"], frame["ci_high"] - frame["mean"]])
    ax.barh(
        y,
        frame["mean"],
        color=[COLORS[f] for f in flags],
        height=0.75,
        xerr=np.abs(err),
        error_kw={"elinewidth": 0.6, "ecolor": "#404040", "capsize": 1.5},
    )
    ax.axvline(0.5, color="#404040", linewidth=0.8, linestyle="--")
    ax.set_yticks(y, [display_label(c) for c in frame["condition"]], fontsize=6)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlim(0, 1)
    ax.set_xlabel(measure, fontsize=9)
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=COLORS[f], label=NAMES[f]) for f in (True, False)]
    fig.legend(handles=handles, loc="outside upper center", ncols=2, frameon=False)
    return png_bytes(fig)


def groups_png(frame: pd.DataFrame, measure: str) -> bytes:
    """Per run, a box of its per-condition values for each group, side by side.

    ``frame``: ``run``, ``stigmatized``, ``mean`` (one row per run and condition)."""
    what = "per-run groups figure"
    frame = checked_frame(
        frame.dropna(subset=["mean"]) if "mean" in frame else frame,
        what,
        ("run",),
        ("mean", "stigmatized"),
    )
    flags = _flags(frame, what)
    runs = frame["run"].unique().tolist()
    fig = Figure(figsize=(max(4.0, 1.2 * len(runs) + 1.5), 3.6), layout="constrained")
    ax = fig.subplots()
    for offset, flag in ((-0.18, True), (0.18, False)):
        data = [frame["mean"][(frame["run"] == r) & (flags == flag)].to_numpy() for r in runs]
        keep = [i for i, d in enumerate(data) if d.size]
        if not keep:
            continue
        boxes = ax.boxplot(
            [data[i] for i in keep],
            positions=np.array(keep) + offset,
            widths=0.32,
            patch_artist=True,
            showfliers=True,
            flierprops={"markersize": 2},
            medianprops={"color": "black"},
        )
        for patch in boxes["boxes"]:
            patch.set_facecolor(COLORS[flag])
            patch.set_alpha(0.75)
    ax.set_xticks(
        np.arange(len(runs)),
        [display_label(r) for r in runs],
        fontsize=9,
        rotation=30 if len(runs) > 3 else 0,
    )
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylim(0, 1)
    ax.set_ylabel(measure, fontsize=9)
    ax.grid(axis="y", color="#e0e0e0", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=COLORS[f], alpha=0.75, label=NAMES[f]) for f in (True, False)]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
    return png_bytes(fig)


def classes_png(frame: pd.DataFrame) -> bytes:
    """Per run and group, the class shares stacked (negative at the bottom).

    ``frame``: ``run``, ``stigmatized`` and a column per class (``negative``, ``neutral``,
    ``positive``, optionally ``other``)."""
    what = "class shares figure"
    classes = [c for c in CLASS_COLORS if c in frame.columns]
    if "negative" not in classes:
        raise InputError(f"{what}: missing column 'negative'")
    frame = checked_frame(frame, what, ("run",), (*classes, "stigmatized"))
    flags = _flags(frame, what)
    labels = [f"{display_label(r)}\n{NAMES[f]}" for r, f in zip(frame["run"], flags)]
    fig = Figure(figsize=(max(4.0, 0.9 * len(frame) + 1.5), 3.8), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(frame))
    bottom = np.zeros(len(frame))
    for c in classes:
        ax.bar(x, frame[c], bottom=bottom, color=CLASS_COLORS[c], width=0.7, label=c)
        bottom += frame[c].to_numpy()
    ax.set_xticks(x, labels, fontsize=7, rotation=30 if len(frame) > 4 else 0)
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("share of predictions", fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(loc="outside lower center", ncols=len(classes), frameon=False)
    return png_bytes(fig)


def correlation_png(frame: pd.DataFrame, x_label: str, y_label: str) -> bytes:
    """One point per condition (``condition``, ``stigmatized``, ``x``, ``y``), coloured by group,
    with the least-squares line."""
    what = "correlation figure"
    frame = checked_frame(frame, what, ("condition",), ("x", "y", "stigmatized"))
    flags = _flags(frame, what)
    fig = Figure(figsize=(5.0, 4.2), layout="constrained")
    ax = fig.subplots()
    for flag in (True, False):
        sub = frame[flags == flag]
        ax.scatter(sub["x"], sub["y"], s=14, color=COLORS[flag], alpha=0.8, label=NAMES[flag])
    if len(frame) >= 2 and np.ptp(frame["x"].to_numpy()) > 0:
        slope, intercept = np.polyfit(frame["x"], frame["y"], 1)
        xs = np.array([frame["x"].min(), frame["x"].max()])
        ax.plot(xs, slope * xs + intercept, color="#404040", linewidth=1.0)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(x_label, fontsize=9)
    ax.set_ylabel(y_label, fontsize=9)
    ax.grid(color="#e0e0e0", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8)
    return png_bytes(fig)
