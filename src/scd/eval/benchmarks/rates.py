"""What the item-choice benchmarks share (CrowS-Pairs, WinoBias, Winogender, the judgment
controls, and one of your own: docs/ARCHITECTURE.md, "Add a benchmark"): a rate with its 95%
Wilson interval, a rate per group, an exact McNemar test of two results on the same items, the
side-by-side section of several runs of one benchmark with each later run paired with the first
(the base model) on the same items (:func:`runs_section`), and the arena columns of a rate
paired with the base model's (:func:`rate_arena`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["paired_lines", "rate", "rate_arena", "rates_by", "runs_section", "runs_table"]

Record = dict[str, Any]


def rate(flags: Iterable[bool]) -> dict[str, Any]:
    """``{k, n, pct, ci_low, ci_high}``: how many of ``flags`` are true, in % with a 95% Wilson
    interval (None where there are none)."""
    from statsmodels.stats.proportion import proportion_confint

    flags = [bool(f) for f in flags]
    k, n = sum(flags), len(flags)
    if n == 0:
        return {"k": 0, "n": 0, "pct": None, "ci_low": None, "ci_high": None}
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return {"k": k, "n": n, "pct": 100.0 * k / n, "ci_low": 100.0 * low, "ci_high": 100.0 * high}


def rates_by(records: list[Record], key: str, flag: str) -> dict[str, dict[str, Any]]:
    """:func:`rate` of ``flag`` per value of ``key``, in the order the values come."""
    groups: dict[str, list[bool]] = {}
    for r in records:
        groups.setdefault(str(r[key]), []).append(bool(r[flag]))
    return {g: rate(f) for g, f in groups.items()}


def paired(
    after: list[Record], before: list[Record], flag: str, id_key: str = "id"
) -> dict[str, Any]:
    """Exact McNemar test of ``flag`` in ``after`` against ``before`` on the items both hold
    (paired by ``id_key``): ``{n, to_true, to_false, p}``."""
    import pandas as pd

    from scd.eval.benchmarks.paired import mcnemar_pair

    def series(records: list[Record]) -> Any:
        return pd.Series({r[id_key]: bool(r[flag]) for r in records}, dtype=bool)

    test = mcnemar_pair(series(after), series(before))
    return {
        "n": test["n"],
        "to_true": test["to_true"],
        "to_false": test["to_false"],
        "p": test["p"],
    }


def cell(block: dict[str, Any] | None) -> str:
    """``pct [low, high] (n)``, one decimal."""
    if not block or block.get("pct") is None:
        return "–"
    return f"{block['pct']:.1f} [{block['ci_low']:.1f}, {block['ci_high']:.1f}] (n={block['n']})"


def paired_lines(
    runs: dict[str, Path | str], flag: str, what: str, id_key: str = "id"
) -> list[str]:
    """Each run after the first paired with it on the items both answered: a Markdown table of
    the items whose ``flag`` changed each way and the exact McNemar p (Holm-corrected across the
    runs)."""
    from statsmodels.stats.multitest import multipletests

    from scd.eval.records import read_records

    names = list(runs)
    if len(names) < 2:
        return []
    first = read_records(Path(runs[names[0]]) / "records.jsonl")
    tests = {
        n: paired(read_records(Path(runs[n]) / "records.jsonl"), first, flag, id_key)
        for n in names[1:]
    }
    holm = multipletests([t["p"] for t in tests.values()], method="holm")[1]
    lines = [
        f"Paired with {names[0]} on the same items (exact McNemar; Holm-corrected across the "
        "runs in parentheses):",
        "",
        f"| run | items | → {what} | → not {what} | p |",
        "|---|---|---|---|---|",
    ]
    for (name, t), h in zip(tests.items(), holm):
        lines.append(
            f"| {name} | {t['n']} | {t['to_true']} | {t['to_false']} | {t['p']:.2g} ({h:.2g}) |"
        )
    return [*lines, ""]


def runs_table(
    summaries: dict[str, dict[str, Any]], rows: list[tuple[str, Callable[[dict], Any]]]
) -> list[str]:
    """Runs side by side: a Markdown row per ``(label, summary -> rate block)``."""
    head = "| | " + " | ".join(summaries) + " |"
    lines = [head, "|" + "---|" * (len(summaries) + 1)]
    for label, get in rows:
        lines.append(f"| {label} | " + " | ".join(cell(get(s)) for s in summaries.values()) + " |")
    return [*lines, ""]


def runs_section(
    runs: dict[str, Path | str],
    summaries: dict[str, dict[str, Any]],
    name: str,
    title: str,
    intro: str,
    rows: list[tuple[str, Callable[[dict], Any]]],
    flag: str,
    what: str,
    *,
    extra: Iterable[str] = (),
    id_key: str = "id",
    label_key: str = "group",
) -> Any:
    """A benchmark's :meth:`~scd.eval.benchmarks.base.Benchmark.table`: ``## title``, the
    ``intro`` paragraph, the runs side by side (a row per ``(label, summary -> rate block)``),
    any ``extra`` lines, then each run after the first paired with it on ``flag``
    (:func:`paired_lines`, the items matched by ``id_key``); tidy rows (``run``, ``label_key``,
    the block's numbers) saved as ``tables/<name>.*``."""
    from scd.eval.benchmarks.tables import Table

    lines = [
        f"## {title}",
        "",
        intro,
        "",
        *runs_table(summaries, rows),
        *extra,
        *paired_lines(runs, flag, what, id_key=id_key),
    ]
    flat = [
        {"run": run, label_key: label, **(get(s) or {})}
        for run, s in summaries.items()
        for label, get in rows
    ]
    return Table("\n".join(lines), flat, name)


def rate_arena(
    prefix: str,
    flag: str,
    result: Path | str,
    base: Path | str,
    items: Path | str,
    id_key: str = "id",
) -> dict[str, Any]:
    """The arena columns of a rate: the share of the arm's records (of the items of ``items``)
    whose ``flag`` is true, ``<prefix>_pct`` with ``_ci_low`` / ``_ci_high`` (95% Wilson) and
    ``_n``, and ``<prefix>_p``: the exact McNemar test against the base model's records on the
    same items (matched by ``id_key``)."""
    from scd.eval.records import read_records

    ids = {r[id_key] for r in read_records(Path(items) / "records.jsonl")}
    arm = [r for r in read_records(Path(result) / "records.jsonl") if r[id_key] in ids]
    ref = [r for r in read_records(Path(base) / "records.jsonl") if r[id_key] in ids]
    block = rate(r[flag] for r in arm)
    return {
        f"{prefix}_pct": block["pct"],
        f"{prefix}_ci_low": block["ci_low"],
        f"{prefix}_ci_high": block["ci_high"],
        f"{prefix}_n": block["n"],
        f"{prefix}_p": paired(arm, ref, flag, id_key)["p"],
    }
