"""The columns of the arena table as their makers declare them: a benchmark's
(:attr:`scd.eval.benchmarks.base.Benchmark.arena_columns`) and the arena's own cost measures.

A :class:`Column` names the row key of its value, its header, what it means (written under the
table, so that every column a reader sees is defined), how many digits it shows, the row keys of
its interval, and whether it is a p-value against the base model (Holm-corrected across arms by
the arena). Values are kept unrounded in the rows (``arena.json``, ``arena.csv``) and rounded
once, here, for the Markdown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Column", "number"]

Row = dict[str, Any]


def number(value: Any, digits: int = 1) -> str:
    """``value`` with ``digits`` decimals, ``–`` for none."""
    return "–" if value is None else f"{value:.{digits}f}"


@dataclass(frozen=True)
class Column:
    """One column of the arena table (see the module docstring)."""

    key: str  # the row key of its value
    label: str  # the header
    defined: str  # what it is, for the note under the table
    digits: int = 1
    ci: tuple[str, str] | None = None  # the row keys of its 95% interval: "value [low, high]"
    p: bool = False  # a p-value against the base model: "p (Holm-corrected p)"
    table: Literal["bias", "transfer"] = "transfer"  # held-out bias, or elsewhere and cost
    render: Callable[[Row], str] | None = None  # a cell made from several keys
    gain: bool = False  # the arena's figure plots its fall from the base model against the KL

    def cell(self, row: Row) -> str:
        """The Markdown cell of ``row`` (``–`` where it has no value)."""
        if self.render is not None:
            return self.render(row)
        value = row.get(self.key)
        if self.p:
            holm = row.get(f"{self.key}_holm")
            if value is None or row.get("arm") == "base":
                return "–"
            return f"{value:.2g} ({holm:.2g})" if holm is not None else f"{value:.2g}"
        if value is None:
            return "–"
        if isinstance(value, int):  # a count
            return str(value)
        text = number(value, self.digits)
        if self.ci is not None and row.get(self.ci[0]) is not None:
            low, high = (row.get(k) for k in self.ci)
            text += f" [{number(low, self.digits)}, {number(high, self.digits)}]"
        return text
