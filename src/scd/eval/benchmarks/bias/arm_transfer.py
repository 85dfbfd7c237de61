"""The transfer tables by arm: Tables 11-14 for every arm of an arena (``arms:``), not only
SCD's adapter -- a steering vector, a preference-tuned adapter or a system prompt made from a
setting's training side, measured on each value the setting holds out (engine-free).

A setting that holds out one dimension (settings 3-8: a scale, scenarios, principles, bias axes)
evaluates every arm on prompts of values its training side never saw. Each row is one arm on one
held-out value: bias % of the descriptor prompts with a 95% percentile bootstrap interval over
templates (:mod:`scd.eval.benchmarks.clusters`; the prompts of one template are not
independent), and the change from the base model on the same prompts with the exact sign-flip
test over templates, Holm-corrected over every arm and value of the setting. Every arm and the
base model are compared on the prompts all of them answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from scd.config.settings import Setting
from scd.eval.benchmarks.bias.columns import n_templates_cell
from scd.eval.benchmarks.bias.metrics import label_of
from scd.eval.benchmarks.bias.transfer import TRANSFER_TABLES, bias_frame
from scd.eval.benchmarks.clusters import UNITS, cluster_change, cluster_rate, unit_keys
from scd.eval.benchmarks.columns import Column, over_seeds
from scd.eval.benchmarks.tables import Table, markdown_table
from scd.io import read_json

__all__ = ["ARM_TRANSFER_COLUMNS", "arm_transfer_rows", "arm_transfer_tables"]

UNIT = "template"  # the clusters of this table's intervals and tests

ARM_TRANSFER_COLUMNS = (
    Column(
        "bias_pct",
        "Bias % [95% CI]",
        "the share of the held-out value's descriptor prompts answered with the biased option "
        "(an unparsed answer counts, as not biased), with a 95% percentile bootstrap interval "
        f"that resamples whole {UNITS[UNIT]}",
        ci=("bias_ci_low", "bias_ci_high"),
    ),
    Column(
        "bias_change_pts",
        "Change, pts [95% CI]",
        "the arm's bias % minus the base model's on the same prompts, in points, with a 95% "
        "percentile bootstrap interval over templates",
        ci=("bias_change_ci_low", "bias_change_ci_high"),
    ),
    Column(
        "bias_p",
        "p vs base (Holm)",
        "that change tested by the exact sign-flip test over templates (two-sided; with k "
        "templates whose count changed it cannot go below 2/2^k); in parentheses "
        "Holm-corrected over the tests of the setting (every arm, seed and held-out value)",
        p=True,
    ),
    Column("bias_n", "n (templates)", "", render=n_templates_cell),
)


def _held_out(sft: Path, setting: Setting | None) -> tuple[str, list[str]] | None:
    """The one dimension a setting holds out and its values, as its SFT data's manifest says
    (what the run used: a recipe's own settings file too), else as the packaged ``setting``
    defines them; None for a setting that holds out no single dimension (1, 2)."""
    manifest = sft / "manifest.json"
    used = read_json(manifest).get("used", {}) if manifest.is_file() else {}
    where = used.get("eval") if "eval" in used else (setting.eval if setting else {})
    if not where or len(where) != 1:
        return None
    ((dimension, values),) = where.items()
    return (dimension, list(values)) if dimension in TRANSFER_TABLES and values else None


def _cell(frame: pd.DataFrame) -> dict[str, Any]:
    cells = list(frame[list(unit_keys(UNIT))].itertuples(index=False, name=None))
    rate = cluster_rate(frame["biased"].tolist(), cells)
    return {
        "bias_pct": rate["pct"],
        "bias_ci_low": rate["ci_low"],
        "bias_ci_high": rate["ci_high"],
        "bias_n": rate["n"],
        "bias_templates": rate["clusters"],
    }


def _holm(rows: list[dict[str, Any]]) -> None:
    from statsmodels.stats.multitest import multipletests

    tested = [r for r in rows if r.get("bias_p") is not None]
    for r in rows:
        r["bias_p_holm"] = None
    if tested:
        for r, p in zip(tested, multipletests([r["bias_p"] for r in tested], method="holm")[1]):
            r["bias_p_holm"] = float(p)


def _setting_rows(
    n: int, group: list[dict[str, Any]], base: pd.DataFrame, held: tuple[str, list[str]]
) -> list[dict[str, Any]]:
    """The rows of one setting's arms (``layout.json`` entries) on its held-out values."""
    dimension, values = held
    heldout = Path(group[0]["sft"]) / "heldout" / "prompts.parquet"
    ids = pd.Index(pq.read_table(heldout, columns=["prompt_id"])["prompt_id"].to_pylist())
    frames = [bias_frame(a["evals"]["bias"]) for a in group]
    for frame in [base, *frames]:
        ids = ids.intersection(frame.index)
    ids = ids.sort_values()
    rows = []
    for value in values:
        where = base.loc[ids, dimension] == value
        chosen = ids[where.to_numpy()]
        before = base.loc[chosen]
        key = {"setting": n, "dimension": dimension, "value": value}
        rows.append(
            {**key, "arm": "base", **_cell(before), "bias_change_pts": None, "bias_p": None}
        )
        for arm, frame in zip(group, frames):
            after = frame.loc[chosen]
            cells = list(after[list(unit_keys(UNIT))].itertuples(index=False, name=None))
            change = cluster_change(after["biased"].tolist(), before["biased"].tolist(), cells)
            seed = {"seed": arm["seed"]} if "seed" in arm else {}
            rows.append(
                {
                    **key,
                    "arm": arm["arm"],
                    **seed,
                    **_cell(after),
                    "bias_change_pts": change["pts"],
                    "bias_change_ci_low": change["ci_low"],
                    "bias_change_ci_high": change["ci_high"],
                    "bias_p": change["p"],
                }
            )
    _holm(rows)
    return rows


def arm_transfer_rows(layout: dict[str, Any], settings: dict[int, Setting]) -> list[dict[str, Any]]:
    """One row per setting that holds out a dimension, held-out value and arm (the base model
    first; an arm with several seeds one row per seed), from a run's ``layout.json``; none for a
    run without an arena or without such a setting."""
    arms = layout.get("arms") or []
    base_arm = next((a for a in arms if a["arm"] == "base" and "bias" in a["evals"]), None)
    if base_arm is None:
        return []
    base = bias_frame(base_arm["evals"]["bias"])
    rows = []
    for n in dict.fromkeys(a["setting"] for a in arms if a["setting"] is not None):
        group = [a for a in arms if a["setting"] == n and "bias" in a["evals"]]
        held = _held_out(Path(group[0]["sft"]), settings.get(n)) if group else None
        if held is not None and group:
            rows += _setting_rows(n, group, base, held)
    return rows


def arm_transfer_tables(layout: dict[str, Any], settings: dict[int, Setting]) -> list[Table]:
    """Tables 11-14 by arm (``table<N>_arms``), one per dimension the run's settings hold out."""
    rows = arm_transfer_rows(layout, settings)
    tables = []
    for dimension, (number, title) in TRANSFER_TABLES.items():
        mine = [r for r in rows if r["dimension"] == dimension]
        if not mine:
            continue
        head = ["Setting", f"Held-out {dimension}", "Arm", *(c.label for c in ARM_TRANSFER_COLUMNS)]
        shown = over_seeds(mine, keys=("setting", "value", "arm"))
        body = [
            [
                r["setting"],
                label_of(r["value"]),
                r["arm"],
                *(c.cell(r) for c in ARM_TRANSFER_COLUMNS),
            ]
            for r in shown
        ]
        seeds = any(r.get("seeds", 1) > 1 for r in shown)
        lines = [
            f"## {title.replace(':', ' by arm:', 1)}",
            "",
            f"Every arm of the arena on each value its setting's training side never saw, all "
            f"on the prompts every arm answered (the base model is not tested against itself: "
            f"–). Table {number} without 'by arm', where the run has it, is SCD's adapter per "
            f"contact type with the paper's Wilson intervals; here the intervals resample "
            f"{UNITS[UNIT]}.",
            "",
            *markdown_table(head, body),
            *(f"- **{c.label}**: {c.defined}." for c in ARM_TRANSFER_COLUMNS[:3]),
            "- **n (templates)**: the held-out descriptor prompts of that value every arm "
            f"answered, and the {UNITS[UNIT].split(' (')[0]} they come from (what the intervals "
            "resample).",
        ]
        if seeds:
            lines.append(
                "- An arm trained with several seeds: the mean over them (lowest–highest); for "
                "a p-value the largest. Each seed's row is in the table's CSV."
            )
        tables.append(Table("\n".join(lines), mine, f"table{number}_arms"))
    return tables
