"""The report's "Steering" section: for each arm that adds a steering vector, the layer and scale
kept and why, the vectors' diagnostics, and the validation curve it was chosen on -- mean margin,
bias and KL against the scale, one line per layer (``figures/steering-<n>.png``,
``tables/steering.*``). A search of an scd before #77 has no margins: its panel is left empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.config.vocabulary import RunLayout
from scd.eval.benchmarks.tables import Table, markdown_table, save_table
from scd.eval.steering import layer_label
from scd.io import read_json

__all__ = ["steering_png", "steering_section"]


def steering_png(curve: list[dict[str, Any]], kept: dict[str, Any], title: str) -> bytes:
    """Validation mean margin (left), bias % (middle) and KL from the base model (right) against
    the scale, a line per layer (or layers steered together); the point kept circled."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 3.2), layout="constrained")
    margin, left, right = fig.subplots(1, 3)
    base = next(p for p in curve if p["scale"] == 0)
    steered = [p for p in curve if p["scale"] != 0]
    for label in dict.fromkeys(layer_label(p["layer"]) for p in steered):
        points = sorted(
            [base, *(p for p in steered if layer_label(p["layer"]) == label)],
            key=lambda p: p["scale"],
        )
        scales, name = [p["scale"] for p in points], _layer_words(label)
        if all("margin" in p for p in points):
            margin.plot(scales, [p["margin"] for p in points], marker="o", ms=3, label=name)
        left.plot(scales, [p["bias_pct"] for p in points], marker="o", ms=3, label=name)
        right.plot(scales, [p["kl"] for p in points], marker="o", ms=3, label=name)
    if "margin" in kept:
        margin.plot([kept["scale"]], [kept["margin"]], "o", ms=11, mfc="none", mec="black")
    left.plot([kept["scale"]], [kept["bias_pct"]], "o", ms=11, mfc="none", mec="black")
    right.plot([kept["scale"]], [kept["kl"]], "o", ms=11, mfc="none", mec="black")
    margin.set(xlabel="scale", ylabel="mean margin, unbiased - biased (nats)")
    left.set(xlabel="scale", ylabel="validation bias %")
    right.set(xlabel="scale", ylabel="KL from base (nats/token)")
    for ax in (margin, left, right):
        ax.grid(color="#e0e0e0", linewidth=0.8)
        ax.spines[["top", "right"]].set_visible(False)
    right.legend(frameon=False, fontsize=8)
    fig.suptitle(title, fontsize=11)
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer, metadata={"Software": None})
    return buffer.getvalue()


def _layer_words(label: str) -> str:
    """``layer 16``, or ``layers 12+16``."""
    return f"layers {label}" if "+" in label else f"layer {label}"


def steering_section(layout: RunLayout, tables: Path, figures: dict[str, bytes]) -> list[str]:
    """The section (empty when no arm steers)."""
    steered = [a for a in layout.get("arms", []) if a.get("steer")]
    if not steered:
        return []
    lines, rows = ["## Steering", ""], []
    for arm in steered:
        info = read_json(Path(arm["steer"]) / "steer.json")
        name = f"steering-{arm['setting']}" + (f"-seed-{arm['seed']}" if "seed" in arm else "")
        kept = info["validation"]
        figures[name] = steering_png(
            info["curve"], kept, f"Setting {arm['setting']}: the {arm['arm']} arm's grid"
        )
        where = "every position" if info.get("positions", "all") == "all" else "the answer"
        lines += [
            f"Setting {arm['setting']}, arm `{arm['arm']}`: "
            f"{_layer_words(layer_label(info['layer']))}, scale "
            f"{info['scale']:g} kept (added at {where}): {info['why']}.",
            "",
            *_diagnostics(info.get("diagnostics")),
            f"{{{{figure:{name}}}}}",
            "",
        ]
        rows += [{"setting": arm["setting"], "arm": arm["arm"], **_point(p)} for p in info["curve"]]
    head = ["Setting", "Layer", "Scale", "Mean margin", "Against %", "Bias %", "n", "KL"]
    body = [
        [
            r["setting"],
            layer_label(r["layer"]),
            f"{r['scale']:g}",
            _num(r.get("margin"), 3),
            _num(r.get("against_pct"), 1),
            f"{r['bias_pct']:.1f}",
            r["n"],
            f"{r['kl']:.4f}",
        ]
        for r in rows
    ]
    table = Table("\n".join(markdown_table(head, body)), rows, "steering")
    lines += [
        "Mean margin: the validation prompts' mean log-probability of the unbiased option minus "
        "the biased one's (what the search maximizes); against %: the share of them whose margin "
        "moved against the push (down when the vector is added, up when subtracted); KL: from "
        "the base model on neutral prompts (nats/token).",
        "",
    ]
    save_table(tables, table)
    return [*lines, *markdown_table(head, body)]


def _point(p: dict) -> dict:
    """A curve point as the table holds it: without its per-prompt margins."""
    return {k: v for k, v in p.items() if k not in ("margins", "key")}


def _num(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _diagnostics(found: dict | None) -> list[str]:
    """A line per layer of the vectors' diagnostics (scd.eval.steering_diagnostics)."""
    if not found:
        return []
    parts = [
        f"layer {la}: consistency {d['consistency']:.2f}, separation {_num(d['separation'], 2)}"
        + (
            ""
            if d.get("anti_steerable_pct") is None
            else f", anti-steerable {d['anti_steerable_pct']:.1f}% at scale "
            f"{d['anti_steerable_scale']:g}"
        )
        for la, d in found.items()
    ]
    return [
        "Diagnostics (the mean cosine of each training pair's difference with the vector; the "
        "standardized distance of the unbiased and biased answers along it; the share of "
        "validation prompts whose margin falls when the vector is added): "
        + "; ".join(parts)
        + ".",
        "",
    ]
