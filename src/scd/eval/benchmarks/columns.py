"""The columns of the arena table as their makers declare them: a benchmark's
(:attr:`scd.eval.benchmarks.base.Benchmark.arena_columns`) and the arena's own cost measures.

A :class:`Column` names the row key of its value, its header, what it means (written under the
table, so that every column a reader sees is defined), how many digits it shows, the row keys of
its interval, and whether it is a p-value against the base model (Holm-corrected across arms by
the arena) or a gate (a verdict an arm must pass to count as debiased; ``<key>_why`` says why one
failed). A definition may name ``{clusters}``: the arena puts the run's cluster unit there
(:data:`scd.eval.benchmarks.clusters.UNITS`). Values are kept unrounded in the rows
(``arena.json``, ``arena.csv``) and rounded once, here, for the Markdown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Column", "number", "over_seeds"]

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
    test: str | None = None  # a gain column: the key of its change's p-value against the base
    gate: bool = False  # a verdict an arm must pass to count as debiased: 1 kept, 0 lost

    def cell(self, row: Row) -> str:
        """The Markdown cell of ``row`` (``–`` where it has no value). A row that is the mean of
        several seeds (``seeds`` > 1, each value's range in ``<key>~min`` / ``<key>~max``)
        shows ``mean (lowest–highest)``, and for a p-value the largest over the seeds; a value
        only some seeds have says of how many."""
        if self.render is not None:
            return self.render(row)
        value = row.get(self.key)
        if row.get("seeds", 1) > 1 and f"{self.key}~max" in row:
            return self._over_seeds(row)
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

    def _over_seeds(self, row: Row) -> str:
        low, high = row[f"{self.key}~min"], row[f"{self.key}~max"]
        n = row.get(f"{self.key}~seeds")
        of = f"{n} of {row['seeds']} seeds" if n else ""  # the others' results still to come
        if self.p:
            holm = row.get(f"{self.key}_holm~max")
            text = f"≤ {high:.2g}" + (f" (≤ {holm:.2g})" if holm is not None else "")
            return text + (f" ({of})" if of else "")
        d = self.digits
        if n == 1:
            return f"{number(row[self.key], d)} ({of})"
        spread = f"{number(low, d)}–{number(high, d)}"
        return f"{number(row[self.key], d)} ({spread}{'; ' + of if of else ''})"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def over_seeds(rows: list[Row], keys: tuple[str, ...] = ("setting", "arm")) -> list[Row]:
    """Rows as a table shows them: the rows of one arm's seeds (same ``keys``) as one row of
    their means, with each number's lowest and highest seed (``<key>~min``, ``<key>~max``) and
    ``seeds``, the number of rows; a row alone stays as it is. A number some seeds lack (their
    result has not finished) is the mean of those that have it, ``<key>~seeds`` of them."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = []
    for group in groups.values():
        merged = {**group[0], "seeds": len(group)}
        if len(group) > 1:
            for key in (k for k in group[0] if k not in keys):
                values = [g.get(key) for g in group if g.get(key) is not None]
                if values and all(_is_number(v) for v in values):
                    merged[key] = sum(values) / len(values)
                    merged[f"{key}~min"], merged[f"{key}~max"] = min(values), max(values)
                    if len(values) < len(group):  # a seed without it (a run not ended)
                        merged[f"{key}~seeds"] = len(values)
        out.append(merged)
    return out
