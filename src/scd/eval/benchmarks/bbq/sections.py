"""Table 15 over several runs, and what it gets from the runs' records so that a BBQ number can
be trusted: the bias scores' intervals, each run paired with the first on the same items, and the
choice under the summed and the per-token (length-normalised) log-probability side by side.

- **Intervals**: s_DIS and s_AMB over all items with their 95% percentile bootstrap over items
  (:func:`~scd.eval.benchmarks.bbq.arena.bias_score_intervals`) and the counts they rest on.
- **Paired**: each run after the first on the items both answered: right → wrong, wrong → right,
  exact McNemar p on correctness (Holm over the comparisons) -- a before/after difference tested
  on the same items, not read off overlapping intervals.
- **Formulas**: s_DIS and s_AMB under Parrish's, lm-evaluation-harness's and HELM's arithmetic
  (:mod:`~scd.eval.benchmarks.bbq.formulas`), which differ on the same predictions.
- **Scoring rule**: the headline is the summed log-probability (the option as the model would
  write it, every token counted); the mean per token is CAPPr's rule (the SCD paper's) and favours
  the multi-token "unknown" answers less severely. Both from the same records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scd.eval.benchmarks.bbq.metrics import markdown, table15_rows
from scd.eval.benchmarks.tables import Table, markdown_table, read_summaries
from scd.eval.records import read_records

__all__ = [
    "convention_lines",
    "interval_lines",
    "paired_lines",
    "rule_lines",
    "table15",
    "trust_sections",
]


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _interval_row(name: str, category: str | None, recs: list[dict]) -> dict[str, Any]:
    from scd.eval.benchmarks.bbq.arena import bias_score_intervals
    from scd.eval.benchmarks.bbq.metrics import metrics_block

    block, ci = metrics_block(recs), bias_score_intervals(recs)
    row = {"model": name, "scope": "bias scores", "n": len(recs)}
    if category is not None:
        row.update(scope="bias scores by category", category=category)
    for key, counted in (("s_dis", "n_non_unknown_dis"), ("s_amb", "n_non_unknown_amb")):
        low, high = ci[key] or (None, None)
        row.update(
            {
                key: block[key],
                f"{key}_ci_low": low,
                f"{key}_ci_high": high,
                f"{key}_n": block[counted],
            }
        )
    return row


def _interval_cells(row: dict[str, Any]) -> list[str]:
    return [
        f"{_fmt(row[k])} [{_fmt(row[k + '_ci_low'])}, "
        f"{_fmt(row[k + '_ci_high'])}] (n={row[k + '_n'] or 0:,})"
        for k in ("s_dis", "s_amb")
    ]


def interval_lines(records: dict[str, list[dict]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Each run's bias scores with their bootstrap intervals and counts, over all categories and
    per category (BBQ's order)."""
    from scd.eval.benchmarks.bbq.data import CATEGORIES
    from scd.eval.benchmarks.bbq.metrics import DISPLAY

    overall = [_interval_row(name, None, recs) for name, recs in records.items()]
    by_category = [
        _interval_row(name, DISPLAY[c], [r for r in recs if r["category"] == c])
        for name, recs in records.items()
        for c in CATEGORIES
        if any(r["category"] == c for r in recs)
    ]
    note = (
        "Percentile bootstrap over items (1,000 resamples, seeded); n: the predictions other "
        "than the unknown answer that the score counts; a category's interval rests on its own "
        "items alone, so it is wide where n is small."
    )
    lines = ["## BBQ bias scores with 95% intervals (all categories)", ""]
    lines += markdown_table(
        ["Model", "s_DIS", "s_AMB"], ([r["model"], *_interval_cells(r)] for r in overall)
    )
    lines += [note, "", "## BBQ bias scores with 95% intervals per category", ""]
    lines += markdown_table(
        ["Model", "Category", "s_DIS", "s_AMB"],
        ([r["model"], r["category"], *_interval_cells(r)] for r in by_category),
    )
    return lines, overall + by_category


def paired_lines(records: dict[str, list[dict]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Each run against the first on the items both answered (exact McNemar on correctness)."""
    from statsmodels.stats.multitest import multipletests

    from scd.eval.benchmarks.paired import mcnemar_pair

    def correct(recs: list[dict]) -> pd.Series:
        return pd.Series({r["id"]: bool(r["correct"]) for r in recs})

    names = list(records)
    first = correct(records[names[0]])
    rows = []
    for name in names[1:]:
        test = mcnemar_pair(correct(records[name]), first)
        rows.append(
            {
                "model": name,
                "scope": "paired",
                "against": names[0],
                "n": test["n"],
                "to_wrong": test["to_false"],
                "to_right": test["to_true"],
                "p": test["p"],
            }
        )
    for row, p in zip(rows, multipletests([r["p"] for r in rows], method="holm")[1]):
        row["p_holm"] = float(p)
    cells = [
        [
            r["model"],
            f"{r['n']:,}",
            r["to_wrong"],
            r["to_right"],
            f"{r['p']:.2g}",
            f"{r['p_holm']:.2g}",
        ]
        for r in rows
    ]
    head = ["Model", "Items both answered", "Right → wrong", "Wrong → right", "McNemar p", "Holm p"]
    title = f"## BBQ paired with {names[0]} (the same items)"
    return [title, "", *markdown_table(head, cells)], rows


def _by_rule(recs: list[dict], key: str) -> dict[str, Any]:
    picks = [int(np.argmax(r[key])) for r in recs]
    out: dict[str, Any] = {}
    for context in ("ambig", "disambig"):
        sub = [(r, p) for r, p in zip(recs, picks) if r["context_condition"] == context]
        n = len(sub)
        out[context] = {
            "n": n,
            "accuracy": sum(p == r["label"] for r, p in sub) / n if n else None,
            "unknown": sum(p == r["unknown_index"] for r, p in sub) / n if n else None,
        }
    return out


def rule_lines(records: dict[str, list[dict]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Accuracy and the share of "unknown" answers per context under both scoring rules (runs
    in choice mode; a written answer has no rule)."""
    rows, cells = [], []
    for name, recs in records.items():
        if not recs or "option_logprobs" not in recs[0]:
            continue
        for rule, key in (
            ("sum (headline)", "option_logprobs"),
            ("mean per token", "option_logprobs_norm"),
        ):
            found = _by_rule(recs, key)
            rows.append(
                {
                    "model": name,
                    "scope": f"rule: {rule}",
                    **{f"{c}_{k}": v for c, d in found.items() for k, v in d.items()},
                }
            )
            cells.append(
                [
                    name,
                    rule,
                    *(
                        f"{_fmt(found[c]['accuracy'])} / "
                        f"{_fmt(found[c]['unknown'])} (n={found[c]['n']:,})"
                        for c in ("ambig", "disambig")
                    ),
                ]
            )
    head = ["Model", "Rule", "Ambiguous: accuracy / unknown", "Disambiguated: accuracy / unknown"]
    note = (
        "The answer is the option of highest summed log-probability (headline) or of highest "
        "mean log-probability per token (CAPPr's rule, the SCD paper's); unknown: the share "
        "of answers that are the unknown option (right on ambiguous items, wrong on "
        "disambiguated ones)."
    )
    if not rows:
        return [], []
    return ["## BBQ under both scoring rules", "", *markdown_table(head, cells), note, ""], rows


def convention_lines(records: dict[str, list[dict]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Each run's overall s_DIS and s_AMB under Parrish's, lm-eval's and HELM's formulas, from the
    same predictions (:mod:`~scd.eval.benchmarks.bbq.formulas`)."""
    from scd.eval.benchmarks.bbq.formulas import CONVENTIONS, bias_scores_by_convention

    rows, cells = [], []
    for name, recs in records.items():
        scores = bias_scores_by_convention(recs)
        flat = {f"{k}_{c}": v for c, d in scores.items() for k, v in d.items()}
        rows.append({"model": name, "scope": "bias score formulas", **flat})
        shown = [" / ".join(_fmt(scores[c][k]) for c in CONVENTIONS) for k in ("s_dis", "s_amb")]
        cells.append([name, *shown])
    names = " / ".join(CONVENTIONS.values())
    note = (
        "The same predictions under each library's arithmetic: HELM scales s_AMB by 1 - the "
        "accuracy over all items (Parrish and lm-eval: over ambiguous items); lm-eval gives 0 "
        "where no answer is biased (the others -1). The libraries also put BBQ to the model "
        "differently (lm-eval: twelve choices; HELM: lettered options), which these numbers do "
        "not show."
    )
    head = ["Model", f"s_DIS ({names})", f"s_AMB ({names})"]
    return [
        "## BBQ bias scores by library formula",
        "",
        *markdown_table(head, cells),
        note,
        "",
    ], rows


def trust_sections(runs: dict[str, Path | str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The three sections (the paired one with two runs or more) from the runs' records."""
    records = {n: read_records(Path(d) / "records.jsonl") for n, d in runs.items()}
    parts = [interval_lines(records), convention_lines(records), rule_lines(records)]
    if len(records) > 1:
        parts.insert(1, paired_lines(records))
    return [x for lines, _ in parts for x in lines], [r for _, rows in parts for r in rows]


def table15(runs: dict[str, Path | str]) -> Table:
    """Table 15 (accuracy, 3 decimals) plus an s_DIS / s_AMB table and each run's details,
    rows in the given order; then, from the records, the bias scores' intervals, each run
    paired with the first, and both scoring rules (:func:`trust_sections`)."""
    rows = table15_rows(read_summaries(runs, "BBQ"))
    lines, more = trust_sections(runs)
    return Table("\n".join([markdown(rows), *lines]), rows + more, "table15")
