"""The BBQ benchmark's columns of the arena table, as the table shows what
:func:`~scd.eval.benchmarks.bbq.arena.bbq_arena` gives."""

from __future__ import annotations

from typing import Any

from scd.eval.benchmarks.columns import Column, number

__all__ = ["BBQ_COLUMNS"]


def _unknown_cell(row: dict[str, Any]) -> str:
    return number(row.get("bbq_unknown_amb_pct")) + " / " + number(row.get("bbq_unknown_dis_pct"))


def _accuracy(key: str, label: str, items: str) -> Column:
    return Column(
        f"bbq_{key}",
        f"{label} [95% CI]",
        f"the share of {items} answered correctly, with its 95% Wilson interval",
        digits=3,
        ci=(f"bbq_{key}_ci_low", f"bbq_{key}_ci_high"),
    )


def _score(key: str, label: str, what: str) -> Column:
    return Column(
        f"bbq_{key}",
        f"{label} [95% CI]",
        f"{what} (Parrish et al. 2022: 0 none, +1 always the stereotype, -1 always against "
        "it), with a percentile bootstrap interval over items",
        digits=3,
        ci=(f"bbq_{key}_ci_low", f"bbq_{key}_ci_high"),
    )


BBQ_COLUMNS = (
    _accuracy("accuracy", "BBQ accuracy", "the BBQ items"),
    _accuracy("acc_amb", "BBQ ambiguous", "the ambiguous BBQ items (right answer: unknown)"),
    _accuracy(
        "acc_dis", "BBQ disambiguated", "the disambiguated BBQ items (the context names the person)"
    ),
    Column(
        "bbq_unknown",
        '"unknown" % amb / dis',
        'the share of ambiguous / disambiguated BBQ items answered "unknown" (on disambiguated '
        "items a rise is over-correction)",
        render=_unknown_cell,
    ),
    _score("s_dis", "s_DIS", "BBQ's bias score on disambiguated items"),
    _score("s_amb", "s_AMB", "BBQ's bias score on ambiguous items, times their error rate"),
    Column(
        "bbq_p",
        "BBQ p vs base (Holm)",
        "exact McNemar test of the arm's correct BBQ answers against the base model's on the "
        "same items; in parentheses Holm-corrected across the arms of the setting",
        p=True,
    ),
)
