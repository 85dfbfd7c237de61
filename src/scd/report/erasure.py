"""The report's "Erasure" section: for each arm that applies a concept eraser, the layers kept
and why, the concept and its classes, and the validation points it was chosen among -- bias,
mean margin and KL of each layer (``tables/erasure.*``)."""

from __future__ import annotations

from pathlib import Path

from scd.config.vocabulary import RunLayout
from scd.eval.benchmarks.tables import Table, markdown_table, save_table
from scd.io import read_json

__all__ = ["erasure_section"]


def _layers(layers: list[int]) -> str:
    return "none" if not layers else "+".join(map(str, layers))


def erasure_section(layout: RunLayout, tables: Path) -> list[str]:
    """The section (empty when no arm erases)."""
    erased = [a for a in layout.get("arms", []) if a.get("erase")]
    if not erased:
        return []
    lines, rows = ["## Erasure", ""], []
    for arm in erased:
        info = read_json(Path(arm["erase"]) / "erase.json")
        tokens = ", ".join(f"{c} {n:,}" for c, n in info["tokens"].items())
        lines += [
            f"Setting {arm['setting']}, arm `{arm['arm']}`: {info['why']}. The concept: the "
            f"{info['concept']} a prompt names ({len(info['classes']) - 1} classes and "
            f"`baseline`), from the descriptor on; tokens fitted per class: {tokens}.",
            "",
        ]
        rows += [{"setting": arm["setting"], "arm": arm["arm"], **_point(p)} for p in info["curve"]]
    head = ["Setting", "Layers", "Validation bias %", "Mean margin", "n", "KL from base"]
    body = [
        [
            r["setting"],
            _layers(r["layers"]),
            f"{r['bias_pct']:.1f}",
            f"{r['margin']:.3f}",
            r["n"],
            f"{r['kl']:.4f}",
        ]
        for r in rows
    ]
    save_table(tables, Table("\n".join(markdown_table(head, body)), rows, "erasure"))
    return [
        *lines,
        *markdown_table(head, body),
        "",
        "Layers: the residual stream entering these decoder layers is erased (0: the token "
        "embeddings; none: the base model). Mean margin: the validation prompts' mean "
        "log-probability of the unbiased option minus the biased one's; KL: from the base "
        "model on neutral prompts (nats/token).",
        "",
    ]


def _point(p: dict) -> dict:
    return {k: v for k, v in p.items() if k not in ("margins", "key")}
