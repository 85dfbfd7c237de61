"""The SCD paper's Figure 1 and Figure 2 as PNG bytes (BBQ's bars:
:mod:`scd.eval.benchmarks.bbq.figures`; the training loss: :mod:`scd.report.loss`).

Every function takes a tidy :class:`pandas.DataFrame`, checks it (a missing column or an empty
frame raises :class:`~scd.errors.InputError`, a ``ValueError``, naming the problem in one line)
and returns PNG bytes drawn with matplotlib's Agg canvas on a private :class:`Figure` — no
``pyplot``, so no global figure state. The PNGs carry no software or date metadata: the same input
gives byte-identical output, so report files can be compared and cached.

Rows and columns are drawn in the order they first appear in the input; sort the frame first if
another order is wanted. Labels are shown with underscores replaced by spaces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from scd.config import vocabulary
from scd.errors import InputError
from scd.eval.benchmarks.plotting import check_unique, checked_frame, display_label, png_bytes

__all__ = ["CONTACT_LABELS", "figure1_png", "figure2_grids", "figure2_png"]

CONTACT_LABELS = {**vocabulary.CONTACT_LABELS, "all": "All"}
BEFORE_COLOR = "#9ecae1"  # lighter: before tuning (as in the paper's Figure 1)
AFTER_COLOR = "#2171b5"  # darker: after tuning
HEATMAP_CMAP = "YlOrRd"
MISSING_COLOR = "#d9d9d9"
NA_LABEL = {"ha": "center", "va": "bottom", "fontsize": 7, "rotation": 90, "color": "#707070"}


def _top(values: np.ndarray, floor: float = 10.0) -> float:
    """A y-axis top from 0: 15% headroom over the largest value, at most 100."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 100.0
    return float(min(100.0, max(floor, math.ceil(finite.max() * 1.15 / 5) * 5)))


def _before_after_bars(ax: Any, sub: pd.DataFrame, top: float) -> None:
    """One panel's "Before" and "After" bars, a pair per setting (``sub``'s rows, in order),
    each labelled with its value, with its error bar when ``sub`` has the interval, and "n/a"
    where the value is missing."""
    x, n, width = np.arange(len(sub)), len(sub), 0.38
    for offset, col, color in (
        (-width / 2, "before", BEFORE_COLOR),
        (width / 2, "after", AFTER_COLOR),
    ):
        err = None
        if f"{col}_low" in sub:  # the 95% interval
            low, high = sub[f"{col}_low"].to_numpy(float), sub[f"{col}_high"].to_numpy(float)
            err = np.nan_to_num([sub[col] - low, high - sub[col]])
        bars = ax.bar(
            x + offset,
            sub[col],
            width,
            color=color,
            yerr=err,
            capsize=2,
            error_kw={"elinewidth": 0.8, "ecolor": "#404040"},
        )
        labels = ["" if np.isnan(v) else f"{v:.1f}" for v in sub[col].to_numpy()]
        ax.bar_label(bars, labels, fontsize=8, padding=2, rotation=90 if n > 4 else 0)
        for xi in x[sub[col].isna().to_numpy()]:  # a missing value is marked, not left blank
            ax.text(xi + offset, top * 0.01, "n/a", **NA_LABEL)


def figure1_png(frame: pd.DataFrame, title: str | None = None) -> bytes:
    """The SCD paper's Figure 1: bias % before vs after tuning, per setting and contact type.

    One panel per contact type present (in the order no, positive, negative contact, all),
    settings on the x axis, a light "Before" and a dark "After" bar for each, each bar labelled
    with its value (so a 0.2% bar is readable); the y axis (bias %) starts at 0. A NaN value
    leaves its bar out (marked "n/a"). ``title`` goes above the panels. With columns
    ``before_low``, ``before_high``, ``after_low``, ``after_high`` (a 95% interval) each bar
    carries its error bar.

    Args:
        frame: one row per (setting, contact) with columns ``setting`` (label such as
            "Setting 1"), ``contact`` (``none``, ``positive``, ``negative`` or ``all``),
            ``before`` and ``after`` (bias %, or NaN), and optionally their intervals.

    Raises:
        InputError: a missing column, an empty frame, an unknown contact, a duplicated
            (setting, contact) row or a non-numeric value.
    """
    what = "figure 1"
    frame = checked_frame(frame, what, ("setting", "contact"), ("before", "after"))
    unknown = sorted(set(frame["contact"]) - set(CONTACT_LABELS))
    if unknown:
        raise InputError(
            f"{what}: unknown contact value(s) {unknown}; expected one of {list(CONTACT_LABELS)}"
        )
    check_unique(frame, ("setting", "contact"), what)

    settings = frame["setting"].unique().tolist()
    contacts = [c for c in CONTACT_LABELS if c in set(frame["contact"])]
    n = len(settings)
    bounds = [c for c in ("before_high", "after_high") if c in frame]
    top = _top(frame[["before", "after", *bounds]].to_numpy())
    panel_w = max(2.6, 0.5 * n + 1.0)
    # Panels in one row while that stays page-wide (≤ 11 in), else two per row.
    ncols = len(contacts) if panel_w * len(contacts) <= 11 else min(2, len(contacts))
    nrows = math.ceil(len(contacts) / ncols)
    fig = Figure(figsize=(panel_w * ncols, 3.4 * nrows + 0.3), layout="constrained")
    grid = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    axes = grid.ravel()
    for ax in axes[len(contacts) :]:
        ax.set_visible(False)
    x = np.arange(n)
    rotate = n > 3
    for ax, contact in zip(axes, contacts):
        sub = frame[frame["contact"] == contact].set_index("setting").reindex(settings)
        _before_after_bars(ax, sub, top)
        ax.set_title(CONTACT_LABELS[contact], fontsize=11)
        ticks = [display_label(s) for s in settings]
        ax.set_xticks(
            x, ticks, rotation=45 * rotate, ha="right" if rotate else "center", fontsize=9
        )
        pad = max(0.0, (3 - n) / 2)  # keep bars slim when there are few settings
        ax.set_xlim(-0.6 - pad, n - 0.4 + pad)
        ax.set_ylim(0, top * 1.12)  # room for the value labels
        ax.grid(axis="y", color="#e0e0e0", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in grid[:, 0]:
        ax.set_ylabel("Bias %")
    if title:
        fig.suptitle(title, fontsize=12)
    handles = [Patch(color=BEFORE_COLOR, label="Before"), Patch(color=AFTER_COLOR, label="After")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
    return png_bytes(fig)


def figure2_png(
    grid: pd.DataFrame,
    after: pd.DataFrame | None = None,
    *,
    titles: Sequence[str] | None = None,
) -> bytes:
    """The SCD paper's Figure 2: a heatmap of bias % by bias axis (rows) and scenario (columns).

    Each cell is annotated with its value to one decimal; NaN cells are grey and blank. The colour
    scale is fixed to 0–100 % (colour bar "Bias %"), so separate heatmaps are comparable. Given
    ``after``, the two grids are drawn side by side on the same rows and columns (the union,
    in ``grid``'s order first) with one shared colour bar.

    Args:
        grid: bias % with index = bias axis (e.g. "religion") and columns = scenario
            (e.g. "education", "workplace", "sports", "community", "healthcare").
        after: optional second grid of the same shape, e.g. after tuning.
        titles: one title per grid; defaults to ``("Bias % by axis and scenario",)`` for one grid
            and ``("Before", "After")`` for two.

    Raises:
        InputError: an empty grid, a non-numeric column or a wrong number of titles.
    """
    grids = figure2_grids(grid, after)
    if titles is None:
        titles = ("Bias % by axis and scenario",) if after is None else ("Before", "After")
    titles = list(titles)
    if len(titles) != len(grids):
        raise InputError(f"figure 2: got {len(titles)} title(s) for {len(grids)} grid(s)")
    rows, cols = list(grids[0].index), list(grids[0].columns)

    # Sized so that two 5-scenario panels stay about 10 in wide (a page width at 150 dpi).
    width = 0.75 * len(cols) * len(grids) + 0.3 * (len(grids) - 1) + 2.6
    fig = Figure(figsize=(width, 0.36 * len(rows) + 1.4), layout="constrained")
    axes = fig.subplots(1, len(grids), squeeze=False)[0]
    cmap = colormaps[HEATMAP_CMAP].with_extremes(bad=MISSING_COLOR)
    image = None
    for i, (ax, g, title) in enumerate(zip(axes, grids, titles)):
        values = g.to_numpy(dtype=float)
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=100, aspect="auto")
        for (r, c), v in np.ndenumerate(values):
            if np.isfinite(v):
                rgba = cmap(min(max(v, 0.0), 100.0) / 100.0)
                luminance = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]
                color = "white" if luminance < 0.5 else "black"
                ax.text(c, r, f"{v:.1f}", ha="center", va="center", fontsize=9, color=color)
        names = [display_label(r).capitalize() for r in rows] if i == 0 else []
        ax.set_xticks(
            range(len(cols)),
            [display_label(c).capitalize() for c in cols],
            rotation=30,
            ha="right",
            fontsize=9,
        )
        ax.set_yticks(range(len(rows)), names, fontsize=9)
        ax.tick_params(length=0)
        ax.set_title(title, fontsize=11)
        for spine in ax.spines.values():
            spine.set_visible(False)
    bar = fig.colorbar(image, ax=list(axes), shrink=0.9, pad=0.02)
    bar.set_label("Bias %")
    return png_bytes(fig)


def figure2_grids(grid: pd.DataFrame, after: pd.DataFrame | None = None) -> list[pd.DataFrame]:
    """The grids as :func:`figure2_png` draws them (NaN: grey), on all their rows and columns."""
    grids = [checked_frame(grid, "figure 2")]
    if after is not None:
        grids.append(checked_frame(after, "figure 2 (after)"))
    rows = list(dict.fromkeys([r for g in grids for r in g.index]))
    cols = list(dict.fromkeys([c for g in grids for c in g.columns]))
    return [g.reindex(index=rows, columns=cols) for g in grids]
