"""BBQ's figure: accuracy and bias scores per category and model, as PNG bytes (as the other
report figures: a checked tidy frame in, deterministic bytes out --
:mod:`scd.eval.benchmarks.plotting`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from scd.eval.benchmarks.plotting import check_unique, checked_frame, display_label, png_bytes

__all__ = ["bbq_bars_png"]


def bbq_bars_png(frame: pd.DataFrame, title: str | None = None) -> bytes:
    """BBQ results per category in four labelled panels: accuracy on ambiguous and on
    disambiguated contexts (0-1), and the bias scores s_AMB (ambiguous) and s_DIS
    (disambiguated) (-1...1, a line at 0).

    Categories run down the y axis with one horizontal bar per model (one colour each), so the
    figure grows in height rather than crowding with many models; every bar is labelled with its
    value. NaN values leave their bar out.

    Args:
        frame: one row per (category, model) with columns ``category`` (e.g. "Age"), ``model``
            (label, e.g. "base" or "tuned"), ``accuracy_ambig``, ``accuracy_disambig``
            (fractions 0-1) and ``bias_ambig`` (s_AMB), ``bias_disambig`` (s_DIS) in [-1, 1].
        title: a title above the panels.

    Raises:
        InputError: a missing column, an empty frame, a duplicated (category, model) row or a
            non-numeric value.
    """
    what = "BBQ bars"
    metrics = ("accuracy_ambig", "accuracy_disambig", "bias_ambig", "bias_disambig")
    frame = checked_frame(frame, what, ("category", "model"), metrics)
    check_unique(frame, ("category", "model"), what)

    categories = frame["category"].unique().tolist()
    models = frame["model"].unique().tolist()
    palette = [f"C{i % 10}" for i in range(len(models))]
    band = 0.8 / len(models)
    y = np.arange(len(categories))
    height = max(2.2, 0.18 * len(categories) * len(models) + 0.35 * len(categories) + 0.6)
    fig = Figure(figsize=(10.0, 2 * height + 0.8), layout="constrained")
    axes = fig.subplots(2, 2, sharey=True)
    panels = (
        ("accuracy_ambig", "Accuracy, ambiguous contexts", (0.0, 1.0)),
        ("accuracy_disambig", "Accuracy, disambiguated contexts", (0.0, 1.0)),
        ("bias_ambig", "Bias score s_AMB (ambiguous contexts)", (-1.0, 1.0)),
        ("bias_disambig", "Bias score s_DIS (disambiguated contexts)", (-1.0, 1.0)),
    )
    for ax, (col, name, xlim) in zip(axes.ravel(), panels):
        for m, (model, color) in enumerate(zip(models, palette)):
            sub = frame[frame["model"] == model].set_index("category").reindex(categories)
            values = sub[col].to_numpy()
            bars = ax.barh(y - 0.4 + band * (m + 0.5), values, band, color=color)
            labels = [
                "" if np.isnan(v) else f"{v:+.2f}" if xlim[0] < 0 else f"{v:.2f}" for v in values
            ]
            ax.bar_label(bars, labels, fontsize=7.5, padding=2)
        ax.set_title(name, fontsize=10)
        ax.set_xlim(xlim[0] - (0.15 if xlim[0] < 0 else 0), xlim[1] + 0.15)
        if xlim[0] < 0:
            ax.axvline(0, color="#404040", linewidth=0.8)
        ax.grid(axis="x", color="#e0e0e0", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in axes[:, 0]:
        ax.set_yticks(y, [display_label(c) for c in categories], fontsize=9)
    axes[0, 0].invert_yaxis()  # the first category on top (the y axis is shared)
    handles = [Patch(color=c, label=display_label(m)) for m, c in zip(models, palette)]
    fig.legend(
        handles=handles, loc="outside lower center", ncols=min(len(handles), 5), frameon=False
    )
    if title:
        fig.suptitle(title, fontsize=12)
    return png_bytes(fig)
