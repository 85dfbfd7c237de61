"""``scd report bias --runs`` (and ``scd eval bias --protocols``' ``tables.md``): several bias
evaluations side by side -- overall and per contact type, bias % [95% CI] and n, the protocol each
used -- and each run paired with the first on the descriptor prompts both answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from scd.config.vocabulary import CONTACT_LABELS, CONTACTS
from scd.eval.benchmarks.bias.metrics import format_cell
from scd.eval.benchmarks.tables import Table, markdown_table, read_summaries

__all__ = ["paired_lines", "runs_table"]


def runs_table(runs: dict[str, Path | str]) -> Table:
    """Bias evaluations side by side: overall and per contact type, bias % [95% CI] and n, the
    protocol each used; with several runs, each paired with the first on the prompts both
    answered (:func:`paired_lines`)."""
    summaries = read_summaries(runs, "bias")
    head = ["Run", "Protocol", "All", *(CONTACT_LABELS[c] for c in CONTACTS), "n"]
    rows, cells = [], []
    for name, s in summaries.items():
        by_contact = {"all": s["overall"], **{c: _contact_cell(s, c) for c in CONTACTS}}
        protocol = f"{s['run'].get('protocol', 'scd')} ({s['run'].get('rule', 'sum')})"
        rows.append(
            {
                "run": name,
                "protocol": protocol,
                **{f"{k}_{c}": v for c, cell in by_contact.items() for k, v in cell.items()},
            }
        )
        cells.append(
            [name, protocol, *map(format_cell, by_contact.values()), f"{s['overall']['n']:,}"]
        )
    md = ["## Bias % by contact type", "", *markdown_table(head, cells)]
    if len(runs) > 1:
        lines, paired = paired_lines(runs)
        md, rows = md + lines, rows + paired
    return Table("\n".join(md), rows, "bias")


def paired_lines(runs: dict[str, Path | str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Each run against the first on the descriptor prompts both answered: the answers that
    changed, towards and away from the biased one, and the exact McNemar p of "biased" (Holm
    over the comparisons) -- how much of a difference is the run's protocol, tuning or engine,
    and not other prompts."""
    from statsmodels.stats.multitest import multipletests

    from scd.eval.benchmarks.paired import mcnemar_pair
    from scd.eval.records import read_records

    def frame(path: Path | str) -> pd.DataFrame:
        df = pd.DataFrame(read_records(Path(path) / "records.jsonl"))
        return df[~df["baseline"]].set_index("prompt_id")

    names = list(runs)
    first = frame(runs[names[0]])
    rows = []
    for name in names[1:]:
        other = frame(runs[name])
        both = first.index.intersection(other.index)
        test = mcnemar_pair(other["biased"], first["biased"])
        changed = int((other.loc[both, "chosen"] != first.loc[both, "chosen"]).sum())
        rows.append(
            {
                "run": name,
                "against": names[0],
                "scope": "paired",
                "n": test["n"],
                "changed": changed,
                "to_biased": test["to_true"],
                "to_unbiased": test["to_false"],
                "p": test["p"],
            }
        )
    for row, p in zip(rows, multipletests([r["p"] for r in rows], method="holm")[1]):
        row["p_holm"] = float(p)
    cells = [
        [
            r["run"],
            f"{r['n']:,}",
            f"{r['changed']:,}",
            r["to_biased"],
            r["to_unbiased"],
            f"{r['p']:.2g}",
            f"{r['p_holm']:.2g}",
        ]
        for r in rows
    ]
    head = [
        "Run",
        "Prompts both answered",
        "Answers changed",
        "→ biased",
        "→ unbiased",
        "McNemar p",
        "Holm p",
    ]
    title = f"## Paired with {names[0]} (the same descriptor prompts)"
    return [title, "", *markdown_table(head, cells)], rows


def _contact_cell(summary: dict[str, Any], contact: str) -> dict[str, Any]:
    """Bias % of one contact type over every scale (pooled from Table 1's counts)."""
    from scd.eval.benchmarks.bias.metrics import wilson_cell

    cells = [row[contact] for row in summary["table1"].values() if contact in row]
    total = {k: sum(c[k] for c in cells) for k in ("biased", "n", "unparsed")}
    return wilson_cell(total["biased"], total["n"], total["unparsed"])
