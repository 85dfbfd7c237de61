"""What a run report's figure captions share: a number, given in the report's order (which
sections a report has depends on what the run did), and what a heatmap's caption says of grey."""

from __future__ import annotations

from typing import Any

__all__ = ["FIGURE", "grey_note", "number_figures"]

FIGURE = "Figure {{number}}"  # a caption's number: number_figures() gives it


def number_figures(text: str) -> str:
    """``text`` with its :data:`FIGURE` markers numbered 1, 2, 3, ... in the order they come
    (:func:`scd.report.build.build_report`, over the whole report)."""
    parts = text.split(FIGURE)
    return "".join(p + (f"Figure {i}" if i < len(parts) else "") for i, p in enumerate(parts, 1))


def grey_note(grid: Any, after: Any = None) -> str:
    """``"; grey: no prompts"`` where :func:`~scd.eval.benchmarks.figures.figure2_png` of these
    grids draws a grey cell (an axis and scenario without a value in a grid), else nothing."""
    from scd.eval.benchmarks.figures import figure2_grids

    blank = any(bool(g.isna().to_numpy().any()) for g in figure2_grids(grid, after))
    return "; grey: no prompts" if blank else ""
