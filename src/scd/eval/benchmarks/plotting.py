"""What the report's figures share: a checked tidy frame in, deterministic PNG bytes out, labels
shown with spaces for underscores (the paper's figures in :mod:`scd.eval.benchmarks.figures`,
BBQ's bars, the stigma probes' figures, the arena's Pareto figure, the training loss)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from scd.errors import InputError

__all__ = ["DPI", "check_unique", "checked_frame", "display_label", "png_bytes"]

DPI = 150


def png_bytes(fig: Figure) -> bytes:
    """Render ``fig`` to deterministic PNG bytes (no Software/date metadata)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def display_label(value: object) -> str:
    """``value`` as a figure shows it: underscores as spaces."""
    return str(value).replace("_", " ")


def checked_frame(
    frame: pd.DataFrame, what: str, keys: Sequence[str] = (), numbers: Sequence[str] | None = None
) -> pd.DataFrame:
    """A copy of ``frame`` with ``numbers`` (default: every column) as floats and ``keys`` as
    strings, after checking that it is a non-empty DataFrame with those columns.

    Raises:
        InputError: not a DataFrame, a missing column, no rows, or a non-numeric number column
            (one line naming ``what``).
    """
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"{what}: expected a pandas DataFrame, got {type(frame).__name__}")
    numbers = list(frame.columns) if numbers is None else numbers
    missing = [c for c in (*keys, *numbers) if c not in frame.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(map(repr, missing))}")
    if frame.empty:
        raise InputError(f"{what}: the frame is empty")
    out = frame.astype(dict.fromkeys(keys, str))
    for col in numbers:
        try:
            out[col] = pd.to_numeric(out[col]).astype(float)
        except (TypeError, ValueError):
            raise InputError(f"{what}: column {col!r} holds non-numeric values") from None
    return out


def check_unique(frame: pd.DataFrame, keys: Sequence[str], what: str) -> None:
    """Raise, naming the first, where ``frame`` holds two rows of one ``keys`` (a pair)."""
    dupes = frame.duplicated(keys)
    if dupes.any():
        row = frame[dupes].iloc[0]
        raise InputError(f"{what}: duplicated row for {row[keys[0]]!r}, {row[keys[1]]!r}")
