"""What a benchmark's tables are made of: :class:`Table` (Markdown, tidy rows, figures), the
finished runs they read (:func:`read_summary`, :func:`read_summaries`, :func:`evaluated`), and how
they are written (:func:`markdown_table`, :func:`save_table` under a run's ``tables/``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.io import json_text, read_json

__all__ = [
    "Table",
    "evaluated",
    "markdown_table",
    "read_summaries",
    "read_summary",
    "save_table",
]


@dataclass(frozen=True)
class Table:
    """Several runs of one benchmark side by side: Markdown, tidy rows (CSV/JSON), the name
    of its files under ``tables/`` and its figures (PNG bytes by name; the Markdown places each
    with ``{{figure:NAME}}``, :mod:`scd.report.html`)."""

    markdown: str
    rows: list[dict[str, Any]]
    name: str
    figures: dict[str, bytes] = dataclasses.field(default_factory=dict)


def evaluated(summary: dict[str, Any]) -> str:
    """What an evaluation's summary is of: ``model`` or ``model + adapter DIR``, a GGUF model by
    its file's name rather than the cache directory it was converted into
    (:func:`~scd.models.resolve.model_name`)."""
    from scd.models.resolve import model_name

    run = summary["run"]
    return model_name(run["model"]) + (f" + adapter {run['adapter']}" if run.get("adapter") else "")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Lines of a Markdown table (and a blank line after it); cells are shown with ``str``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows] + [""]


def read_summary(
    run: Path | str, what: str, *, probe: bool = False, key: str = "runs", value: Any = None
) -> dict[str, Any]:
    """The ``summary.json`` of a finished ``what`` run (``probe``: a run of the stigma probe
    ``what``).

    Raises:
        InputError: no summary, or a run of another probe (``--KEY VALUE``; default value: ``run``).
    """
    value = run if value is None else value
    file = Path(run) / "summary.json"
    if not file.is_file():
        raise InputError(f"no summary.json (not a finished {what} run)", key=key, value=value)
    summary = read_json(file)
    if probe and summary.get("probe") != what:
        raise InputError(f"a {summary.get('probe')!r} run, not {what}", key=key, value=value)
    return summary


def read_summaries(
    runs: dict[str, Path | str], what: str, *, probe: bool = False
) -> dict[str, dict[str, Any]]:
    """Each run's ``summary.json`` by name (:func:`read_summary`, naming a run as ``--runs`` gave
    it).

    Raises:
        InputError: no runs, or as :func:`read_summary`.
    """
    if not runs:
        raise InputError("give at least one NAME=DIR", key="runs")
    return {n: read_summary(d, what, probe=probe, value=f"{n}={d}") for n, d in runs.items()}


def save_table(tables: Path, table: Table) -> None:
    """``tables/<name>.md``, ``.json`` and ``.csv``."""
    import pandas as pd

    tables.mkdir(parents=True, exist_ok=True)
    (tables / f"{table.name}.md").write_text(table.markdown.rstrip() + "\n")
    (tables / f"{table.name}.json").write_text(json_text(table.rows))
    pd.DataFrame(table.rows).to_csv(tables / f"{table.name}.csv", index=False)
