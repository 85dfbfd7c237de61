"""The report's training-loss figure: the loss by step of each training, as PNG bytes."""

from __future__ import annotations

from matplotlib.figure import Figure

from scd.eval.benchmarks.plotting import display_label, png_bytes

__all__ = ["loss_png"]


def loss_png(curves: dict[str, list[tuple[int, float]]], title: str | None = None) -> bytes:
    """Training loss by step, one line per run (a setting's training), labelled in a legend."""
    fig = Figure(figsize=(7.0, 3.4), layout="constrained")
    ax = fig.subplots()
    for name, points in curves.items():
        if points:
            steps, losses = zip(*points)
            ax.plot(
                steps, losses, marker="o", markersize=3, linewidth=1.4, label=display_label(name)
            )
    ax.set_xlabel("step", fontsize=10)
    ax.set_ylabel("training loss", fontsize=10)
    ax.grid(color="#e0e0e0", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    return png_bytes(fig)
