"""The report's "Arena" section: the arena's tables (:mod:`scd.report.arena_tables`, their rows
:mod:`scd.report.arena_rows`, the arms' verdicts :mod:`scd.report.arena_verdicts`), saved as
``tables/arena.{md,csv,json}``, and its Pareto figure (``figures/arena.png``: each arm's fall in
the gain column against its capability cost). This module names no benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.config.vocabulary import RunLayout
from scd.eval.benchmarks import REGISTRY
from scd.eval.benchmarks.columns import Column
from scd.eval.benchmarks.tables import save_table
from scd.report.arena_tables import arena_table

__all__ = ["arena_section"]


def _gain() -> Column | None:
    """The column the arena's figure plots (a benchmark's, :attr:`Column.gain`)."""
    return next((c for b in REGISTRY.values() for c in b.arena_columns if c.gain and c.ci), None)


def _pareto(rows: list[dict[str, Any]], gain: Column) -> Any:
    import pandas as pd

    points = []
    for r in rows:
        base = next(b for b in rows if b["setting"] == r["setting"] and b["arm"] == "base")
        key, (low, high) = gain.key, gain.ci
        if r.get("kl_mean") is None or r.get(key) is None or base.get(key) is None:
            continue
        label = (
            r["arm"] if len({x["setting"] for x in rows}) == 1 else f"{r['arm']} ({r['setting']})"
        )
        lost = any(r.get(c.key) == 0 for b in REGISTRY.values() for c in b.arena_columns if c.gate)
        points.append(
            {
                "label": label,
                "kept": not lost,
                "cost": r["kl_mean"],
                "cost_low": r.get("kl_ci_low"),
                "cost_high": r.get("kl_ci_high"),
                "gain": base[key] - r[key],
                "gain_low": base[key] - r[high],
                "gain_high": base[key] - r[low],
            }
        )
    return pd.DataFrame(points)


def arena_section(
    layout: RunLayout, tables: Path, figures: dict[str, bytes], unit: str = "template"
) -> list[str]:
    """The report's "Arena" section (and ``tables/arena.*``, ``figures/arena.png``), clustered
    by ``unit`` (the recipe's ``arena.cluster_unit``)."""
    from scd.eval.benchmarks.captions import FIGURE
    from scd.report.pareto import pareto_png

    table = arena_table(layout, unit)
    save_table(tables, table)
    lines = ["## Arena", "", table.markdown.rstrip(), ""]
    gain = _gain()
    frame = _pareto(table.rows, gain) if gain is not None else []
    if len(frame):
        what = gain.label.split(" [")[0]
        figures["arena"] = pareto_png(frame, title=f"Fall in {what} against capability cost")
        lines += [
            "{{figure:arena}}",
            "",
            f"*{FIGURE}. Each arm's fall in {what} from the base model (base minus arm; bars: "
            "the arm's 95% interval, the base taken as fixed) against its KL divergence from "
            "the base model on neutral prompts (bars: bootstrap interval); the dashed line joins "
            "the arms that no other beats on both; a hollow point is an arm that lost its "
            "judgment (the judgment gate), not debiased whatever its fall, and off that line.*",
            "",
        ]
    readings = [b.arena_reading for b in REGISTRY.values() if b.arena_reading]
    lines += [
        "How to read it: "
        + " ".join(readings)
        + (" " if readings else "")
        + "A KL near 0 means the arm answers neutral prompts as the base model does; it cannot "
        "show a loss of skills the neutral prompts do not exercise (list lm-eval tasks for "
        "those).",
        "",
    ]
    return lines
