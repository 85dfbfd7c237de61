"""Figures 1 and 2 of Mina et al. 2024 for AQ-27 runs, as PNG bytes (the house style of
:mod:`scd.eval.benchmarks.figures`: a private matplotlib Figure, deterministic bytes, a bad frame
is an :class:`~scd.errors.InputError`).

Both take the runs' records as one tidy frame (:func:`records_frame`): one row per record with
``run``, ``dimension``, ``illness_type`` (``mental`` or ``physical``) and ``score``. Runs and
dimensions are drawn in the order they first appear (records come in questionnaire order), after
"All" (every record of the run).

- :func:`boxes_png` -- Figure 1: per run (a panel each), box plots of the records' scores, mental
  and physical side by side, overall and per stigma dimension.
- :func:`diffs_png` -- Figure 2: per run (a bar group each), one bar per dimension (and "All"):
  the mean score of the mental illnesses minus that of the physical ones
  (:func:`mean_differences`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from scd.errors import InputError
from scd.eval.benchmarks.plotting import checked_frame, display_label, png_bytes

__all__ = ["boxes_png", "diffs_png", "mean_differences", "records_frame"]

TYPES = ("mental", "physical")
COLORS = {"mental": "#cb181d", "physical": "#2171b5"}
ALL = "all"
ALL_COLOR = "#404040"
COLUMNS = ("run", "dimension", "illness_type", "score")


def records_frame(runs: Mapping[str, Path | str]) -> pd.DataFrame:
    """The records of finished AQ-27 runs (``DIR/records.jsonl``) as one tidy frame, by run name.

    Raises:
        InputError: a run without records.
    """
    from scd.eval.records import read_records

    parts = []
    for name, directory in runs.items():
        records = read_records(Path(directory) / "records.jsonl")
        part = pd.DataFrame(records, columns=list(COLUMNS[1:]))
        parts.append(part.assign(run=name)[list(COLUMNS)])
    if not parts:
        raise InputError("give at least one NAME=DIR", key="runs")
    return pd.concat(parts, ignore_index=True)


def _check(frame: pd.DataFrame, what: str) -> pd.DataFrame:
    frame = checked_frame(frame, what, ("run", "dimension", "illness_type"), ("score",))
    unknown = sorted(set(frame["illness_type"]) - set(TYPES))
    if unknown:
        raise InputError(f"{what}: unknown illness_type value(s) {unknown}; expected {list(TYPES)}")
    frame = frame[np.isfinite(frame["score"])]
    if frame.empty:
        raise InputError(f"{what}: no finite score")
    return frame


def _groups(frame: pd.DataFrame) -> list[str]:
    return [ALL, *(d for d in frame["dimension"].unique() if d != ALL)]


def _name(group: str) -> str:
    return "All" if group == ALL else display_label(group).capitalize()


def mean_differences(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run and group ("all", then each dimension): the mean score of the mental illnesses
    minus that of the physical ones (NaN where a type has no record).

    With every illness scored in every frame (as the probe does) this equals the summary's
    ``mean_diff`` (the mean over frames of the per-frame difference).

    Returns:
        ``run``, ``dimension``, ``mean_mental``, ``mean_physical``, ``mean_diff``.

    Raises:
        InputError: as :func:`boxes_png`.
    """
    frame = _check(frame, "AQ-27 differences")
    rows = []
    for run in frame["run"].unique():
        sub = frame[frame["run"] == run]
        for group in _groups(frame):
            part = sub if group == ALL else sub[sub["dimension"] == group]
            means = {t: part["score"][part["illness_type"] == t].mean() for t in TYPES}
            rows.append(
                {
                    "run": run,
                    "dimension": group,
                    "mean_mental": means["mental"],
                    "mean_physical": means["physical"],
                    "mean_diff": means["mental"] - means["physical"],
                }
            )
    return pd.DataFrame(rows)


def boxes_png(frame: pd.DataFrame, measure: str = "score", title: str | None = None) -> bytes:
    """Mina et al. 2024's Figure 1: per run, box plots of the scores of the mental and the
    physical illnesses side by side, for all records and per stigma dimension.

    Args:
        frame: one row per record: ``run``, ``dimension``, ``illness_type``, ``score``.
        measure: the score axis' label.
        title: a title above the panels.

    Raises:
        InputError: a missing column, an empty frame, an illness type other than mental and
            physical, a non-numeric score or none finite.
    """
    frame = _check(frame, "AQ-27 boxes")
    runs, groups = frame["run"].unique().tolist(), _groups(frame)
    fig = Figure(
        figsize=(max(7.0, 0.75 * len(groups) + 2.0), 2.9 * len(runs) + 0.6), layout="constrained"
    )
    axes = fig.subplots(len(runs), 1, squeeze=False)[:, 0]
    x = np.arange(len(groups))
    for ax, run in zip(axes, runs):
        sub = frame[frame["run"] == run]
        for offset, kind in ((-0.19, "mental"), (0.19, "physical")):
            of_kind = sub[sub["illness_type"] == kind]
            data = [
                of_kind["score"] if g == ALL else of_kind["score"][of_kind["dimension"] == g]
                for g in groups
            ]
            keep = [i for i, d in enumerate(data) if len(d)]
            if not keep:
                continue
            boxes = ax.boxplot(
                [data[i].to_numpy() for i in keep],
                positions=x[keep] + offset,
                widths=0.34,
                patch_artist=True,
                medianprops={"color": "black"},
                flierprops={
                    "markersize": 1.5,
                    "markeredgewidth": 0.4,
                    "markeredgecolor": "#808080",
                },
            )
            for patch in boxes["boxes"]:
                patch.set_facecolor(COLORS[kind])
                patch.set_alpha(0.75)
        ax.axvline(0.5, color="#b0b0b0", linewidth=0.8, linestyle="--")  # "All" | dimensions
        ax.set_xticks(x, [_name(g) for g in groups], fontsize=8.5, rotation=30, ha="right")
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_ylabel(measure, fontsize=9)
        ax.set_title(display_label(run), fontsize=10)
        ax.grid(axis="y", color="#e0e0e0", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=COLORS[t], alpha=0.75, label=f"{t} illnesses") for t in TYPES]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return png_bytes(fig)


def diffs_png(frame: pd.DataFrame, measure: str = "score", title: str | None = None) -> bytes:
    """Mina et al. 2024's Figure 2: per run a group of bars, one per dimension (and "All"), each
    the mean score of the mental illnesses minus that of the physical ones
    (:func:`mean_differences`), labelled with its value; a line at 0. A dimension keeps its colour
    in every group. A NaN difference leaves its bar out.

    Args:
        frame: as :func:`boxes_png`.
        measure: what the score is (in the axis' label).
        title: a title above the bars.

    Raises:
        InputError: as :func:`boxes_png`.
    """
    diffs = mean_differences(frame)
    runs, groups = diffs["run"].unique().tolist(), diffs["dimension"].unique().tolist()
    palette = [colormaps["tab10"](i) for i in range(10) if i != 7]  # no grey: "All" is grey
    colors = {g: ALL_COLOR if g == ALL else palette[i % 9] for i, g in enumerate(groups, -1)}
    band = 0.85 / len(groups)
    fig = Figure(
        figsize=(max(6.0, 0.32 * len(groups) * len(runs) + 2.2), 4.0), layout="constrained"
    )
    ax = fig.subplots()
    x = np.arange(len(runs))
    values = diffs.set_index(["run", "dimension"])["mean_diff"]
    for i, group in enumerate(groups):
        heights = np.array([values.get((r, group), np.nan) for r in runs], dtype=float)
        bars = ax.bar(x - 0.425 + band * (i + 0.5), heights, band * 0.92, color=colors[group])
        labels = ["" if np.isnan(v) else f"{v:+.3g}" for v in heights]
        ax.bar_label(bars, labels, fontsize=6.5, padding=2, rotation=90)
    finite = diffs["mean_diff"].to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    span = max(float(np.abs(finite).max()) if finite.size else 1.0, 1e-6)
    ax.set_ylim(
        min(0.0, finite.min(initial=0.0)) - 0.3 * span,
        max(0.0, finite.max(initial=0.0)) + 0.3 * span,
    )
    ax.axhline(0, color="#404040", linewidth=0.8)
    ax.set_xticks(x, [display_label(r) for r in runs], fontsize=9)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylabel(f"mental − physical\n(mean {measure})", fontsize=9)
    ax.grid(axis="y", color="#e0e0e0", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=colors[g], label=_name(g)) for g in groups]
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=min(len(handles), 5),
        frameon=False,
        fontsize=8,
    )
    if title:
        ax.set_title(title, fontsize=11)
    return png_bytes(fig)
