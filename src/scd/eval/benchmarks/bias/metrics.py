"""Bias metrics over evaluator records (engine-free): bias %, 95% Wilson intervals, tables.

Bias % = biased responses / total responses x 100 (SCD paper, A.7) per scale x contact (Table 1),
axis x scenario (Tables 3-8), principle, axis and descriptor; sections marked "beyond the paper"
add a descriptor-free baseline, the excess over it and the answer tendency.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from scd.config.vocabulary import CONTACT_LABELS, CONTACTS, PRINCIPLES, SCALES, SCENARIO_TABLE_ORDER
from scd.errors import InputError
from scd.eval.benchmarks.tables import markdown_table

__all__ = [
    "SMALL_N",
    "bias_rate",
    "bias_table",
    "format_cell",
    "format_pct",
    "grid_markdown",
    "label_of",
    "n_line",
    "records_frame",
    "summarize",
    "tables_markdown",
]

# Display orders (the paper's): unknown values found in the records follow, sorted.
TOP_DESCRIPTORS = 20
_NOTES = {
    "all": "Bias % = biased / all responses x 100 (the paper's convention): unparsed answers "
    "count in the total, as not biased.",
    "parsed": "Bias % = biased / parsed responses x 100 (not the paper's convention): unparsed "
    "answers are excluded from the total.",
}
_BASELINE_NOTE = (
    "Bias % of the same prompts with no descriptor, and the excess of the descriptor prompts "
    "over it in percentage points (not in the paper)."
)
_TENDENCY_NOTE = (
    "Share of answers that are the first option (Yes/Likely/Mostly; not in the paper). Half of "
    "the prompts have a negative action, so always answering the first option scores 50% bias."
)
SMALL_N = 30  # below it a cell's interval is wide: the tables say so
_COLUMNS = "principle scenario scale contact axis descriptor baseline options chosen biased"


def records_frame(records: Iterable[dict]) -> pd.DataFrame:
    """Evaluator records as a frame, one row per record: ``biased``, ``unparsed`` and
    ``baseline`` are booleans (unparsed is never biased), plus ``first_answer`` (``options[0]``)
    and ``first_option`` (it was chosen)."""
    df = pd.DataFrame(list(records))
    for col in [*_COLUMNS.split(), "unparsed"]:
        if col not in df:
            df[col] = None
    unp, base = df["unparsed"], df["baseline"]
    df["unparsed"] = unp.eq(True) | (unp.isna() & df["chosen"].isna())
    df["biased"] = df["biased"].eq(True) & ~df["unparsed"]
    df["baseline"] = base.eq(True) | (base.isna() & df["axis"].eq("baseline"))
    df["first_answer"] = [
        o[0] if isinstance(o, (list, tuple, np.ndarray)) and len(o) else None for o in df["options"]
    ]
    df["first_option"] = df["chosen"].eq(df["first_answer"]) & ~df["unparsed"]
    return df


def _wilson(count: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Rows: percent, low and high of the 95% Wilson interval (in percent); NaN where n == 0."""
    count, n = np.asarray(count, dtype=float), np.asarray(n, dtype=float)
    ok, out = n > 0, np.full((3, n.size), np.nan)
    low, high = proportion_confint(count[ok], n[ok], alpha=0.05, method="wilson")
    out[:, ok] = 100.0 * np.vstack([count[ok] / n[ok], low, high])
    return out


def _table(df: pd.DataFrame, keys: list[str], den: str, flag: str = "biased") -> pd.DataFrame:
    """Counts of ``flag`` per group of ``keys``, with percent and Wilson interval."""
    if den not in _NOTES:
        raise InputError(f"denominator must be one of {tuple(_NOTES)}, not {den!r}")
    counted = ~df["unparsed"] if den == "parsed" else pd.Series(True, index=df.index)
    work = pd.DataFrame({"count": df[flag] & counted, "n": counted, "unparsed": df["unparsed"]})
    work = work.astype(int)
    if keys:
        work[keys] = df[keys]
        out = work.groupby(keys, sort=True, dropna=False).sum().reset_index()
    else:
        out = work.sum().to_frame().T
    out = out.rename(columns={"count": flag})
    out["pct"], out["ci_low"], out["ci_high"] = _wilson(out[flag], out["n"])
    return out[[*keys, flag, "n", "pct", "ci_low", "ci_high", "unparsed"]]


def bias_table(
    df: pd.DataFrame,
    rows: str | list[str],
    cols: str | list[str] | None = None,
    denominator: str = "all",
) -> pd.DataFrame:
    """Tidy bias table of a :func:`records_frame`: one row per (rows + cols) cell, the key
    columns plus ``biased, n, pct, ci_low, ci_high, unparsed`` (percent; NaN if n == 0).
    ``denominator``: ``"all"`` (paper) or ``"parsed"`` (unparsed answers excluded)."""
    keys = [[] if k is None else [k] if isinstance(k, str) else list(k) for k in (rows, cols)]
    return _table(df, keys[0] + keys[1], denominator)


def _cell(row: Any = None, flag: str = "biased") -> dict[str, Any]:
    if row is None:
        return {flag: 0, "n": 0, "pct": None, "ci_low": None, "ci_high": None, "unparsed": 0}
    ints = {flag: int(row[flag]), "n": int(row["n"])}
    floats = {k: None if pd.isna(row[k]) else float(row[k]) for k in ("pct", "ci_low", "ci_high")}
    return {**ints, **floats, "unparsed": int(row["unparsed"])}


def wilson_cell(biased: int, n: int, unparsed: int = 0) -> dict[str, Any]:
    """A cell of ``biased`` of ``n`` responses: percent and 95% Wilson interval."""
    pct, low, high = _wilson(np.array([biased]), np.array([n]))[:, 0]
    return _cell(
        {"biased": biased, "n": n, "pct": pct, "ci_low": low, "ci_high": high, "unparsed": unparsed}
    )


def bias_rate(df: pd.DataFrame, denominator: str = "all") -> dict[str, Any]:
    """Overall bias of a :func:`records_frame` (``denominator`` as in :func:`bias_table`):
    ``{biased, n, pct, ci_low, ci_high, unparsed}``; percentages are None when n == 0."""
    return _cell(_table(df, [], denominator).iloc[0])


def _nested(df: pd.DataFrame, keys: list, orders: list, den: str, flag: str = "biased") -> dict:
    """``{k1: {k2: cell}}`` in display order; the known values in ``orders`` always appear."""
    table = _table(df, keys, den, flag)
    cells = {tuple(r[k] for k in keys): _cell(r, flag) for _, r in table.iterrows()}

    def level(prefix: tuple, sub: pd.DataFrame) -> dict[str, Any]:
        i = len(prefix)
        vals = [*orders[i], *sorted(set(sub[keys[i]]) - set(orders[i]), key=str)]
        if i + 1 == len(keys):
            return {str(v): cells.get((*prefix, v), _cell(None, flag)) for v in vals}
        return {str(v): level((*prefix, v), sub[sub[keys[i]] == v]) for v in vals}

    return level((), table)


def summarize(records: Iterable[dict] | pd.DataFrame, denominator: str = "all") -> dict[str, Any]:
    """All the paper's tables (plus the labelled extras) as one JSON-serialisable dict.

    Args:
        records: Evaluator records (dicts) or a frame from :func:`records_frame`.
        denominator: ``"all"`` (the paper's convention) or ``"parsed"``.

    Returns:
        ``denominator``, ``denominator_note``, ``n_records``, ``n_baseline_records``, ``overall``
        (a cell), ``table1`` {scale: {contact: cell}}, ``axis_by_scenario`` {scale: {axis:
        {scenario: cell}}}, ``by_principle``, ``by_descriptor`` {axis: {descriptor: cell}},
        ``by_axis``, ``contact_hypothesis`` {scale: {none, positive, negative, holds}}, then beyond
        the paper (named in ``beyond_paper``): ``baseline`` and ``excess`` (points) when there are
        baseline records, and ``answer_tendency`` {scale: {option, first_option, n, pct, ...}}.
        A cell is ``{biased, n, pct, ci_low, ci_high, unparsed}`` (percent; None when n == 0).
    """
    df = records if isinstance(records, pd.DataFrame) else records_frame(records)
    desc, base = df[~df["baseline"]], df[df["baseline"]]
    s_c, a_s = [SCALES, CONTACTS], [(), SCENARIO_TABLE_ORDER]
    overall = bias_rate(desc, denominator)  # validates the denominator first
    table1 = _nested(desc, ["scale", "contact"], s_c, denominator)
    out: dict[str, Any] = {
        "denominator": denominator,
        "denominator_note": _NOTES[denominator],
        "n_records": len(df),
        "n_baseline_records": len(base),
        "overall": overall,
        "table1": table1,
        "axis_by_scenario": {
            str(s): _nested(desc[desc["scale"] == s], ["axis", "scenario"], a_s, denominator)
            for s in table1
            if (desc["scale"] == s).any()
        },
        "by_principle": _nested(desc, ["principle"], [PRINCIPLES], denominator),
        "by_descriptor": _nested(desc, ["axis", "descriptor"], [(), ()], denominator),
        "by_axis": _nested(desc, ["axis"], [()], denominator),
        "contact_hypothesis": {},
    }
    for scale, row in table1.items():
        p = {c: row[c]["pct"] for c in CONTACTS}
        holds = None if None in p.values() else p["positive"] < p["none"] < p["negative"]
        out["contact_hypothesis"][scale] = {**p, "holds": holds}
    if len(base):
        out["baseline"] = _nested(base, ["scale", "contact"], s_c, denominator)
        out["excess"] = {
            s: {c: _diff(table1[s][c]["pct"], b["pct"]) for c, b in row.items()}
            for s, row in out["baseline"].items()
        }
    tendency = _nested(desc, ["scale"], [SCALES], denominator, flag="first_option")
    firsts = desc.groupby("scale")["first_answer"].first()
    out["answer_tendency"] = {s: {"option": firsts.get(s), **c} for s, c in tendency.items()}
    out["beyond_paper"] = [k for k in ("baseline", "excess", "answer_tendency") if k in out]
    return out


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def format_pct(value: float | None, digits: int = 1, sign: bool = False) -> str:
    """``"27.5"`` (``"+27.5"`` with ``sign``); an en dash for a missing value."""
    return "–" if value is None else f"{value:{'+' if sign else ''}.{digits}f}"


def format_cell(cell: dict | None, digits: int = 1) -> str:
    """``"27.5 [25.1, 29.9]"`` for a cell dict; ``"–"`` when it is missing or has n == 0."""
    if not cell or cell.get("pct") is None:
        return "–"
    lo, hi = format_pct(cell["ci_low"], digits), format_pct(cell["ci_high"], digits)
    return f"{format_pct(cell['pct'], digits)} [{lo}, {hi}]"


def label_of(key: object) -> str:
    """A key as a table label: "sexual_orientation" -> "Sexual orientation"."""
    return str(key).replace("_", " ").capitalize()


def grid_markdown(grid: dict[str, dict[str, dict]], first: str) -> list[str]:
    """Lines of a Markdown table of cells ``grid[row][column]`` (``first`` heads the row names),
    then the prompts per cell (:func:`n_line`)."""
    cols = list(dict.fromkeys(c for row in grid.values() for c in row))
    head = [first] + [CONTACT_LABELS.get(c, label_of(c)) for c in cols]
    rows = ([label_of(r)] + [format_cell(grid[r].get(c)) for c in cols] for r in grid)
    note = n_line([cell.get("n", 0) for row in grid.values() for cell in row.values() if cell])
    return [*markdown_table(head, rows), *([note, ""] if note else [])]


def n_line(ns: list[int], unit: str = "prompts") -> str:
    """``n per cell: 24–300 prompts.`` and, where a cell holds fewer than :data:`SMALL_N`, a
    warning that its interval is wide and its differences are not to be read alone."""
    ns = [n for n in ns if n]
    if not ns:
        return ""
    low, high = min(ns), max(ns)
    text = f"n per cell: {low:,}" + ("" if low == high else f"–{high:,}") + f" {unit}."
    small = sum(n < SMALL_N for n in ns)
    if small:
        text += (
            f" **{small} of {len(ns)} cells rest on fewer than {SMALL_N} {unit}:** their "
            "intervals are wide; a difference between such cells says little alone."
        )
    return text


def _list(cells: dict[str, dict], first: str, head: str = "Bias % [95% CI]") -> list[str]:
    rows = ([label_of(k), format_cell(v), str(v["n"])] for k, v in cells.items())
    return markdown_table([first, head, "n"], rows)


def tables_markdown(summary: dict[str, Any], title: str = "Bias evaluation") -> str:
    """:func:`summarize` output as Markdown under the heading ``title``, in the paper's table
    layouts: Table 1, the contact-hypothesis check, axis x scenario per scale, the
    principle/axis/top-descriptor tables, then the sections beyond the paper."""
    s, ov = summary, summary["overall"]
    n_line = (
        f"Denominator: `{s['denominator']}`; n = {ov['n']} descriptor prompts ({ov['unparsed']} "
        f"unparsed), {s['n_baseline_records']} baseline prompts. Cells: bias % [95% Wilson CI]."
    )
    lines = [f"# {title}", "", s["denominator_note"], "", n_line, "", f"Overall: {format_cell(ov)}"]
    lines += ["", "## Table 1: bias % by scale and contact", ""]
    lines += grid_markdown(s["table1"], "Scale")
    lines += ["## Contact hypothesis (positive < none < negative)", ""]
    mark = {True: "✓", False: "✗", None: "–"}
    hyp = s["contact_hypothesis"].items()
    rows = ([label_of(k), *(format_pct(v[c]) for c in CONTACTS), mark[v["holds"]]] for k, v in hyp)
    lines += markdown_table(["Scale", *CONTACT_LABELS.values(), "Holds"], rows)
    for scale, grid in s["axis_by_scenario"].items():
        lines += [f"## Bias % by axis and scenario: {label_of(scale)} prompts", ""]
        lines += grid_markdown(grid, "Axis")
    lines += ["## Bias % by principle", "", *_list(s["by_principle"], "Principle")]
    lines += ["## Bias % by axis", "", *_list(s["by_axis"], "Axis")]
    flat = [(a, d, c) for a, ds in s["by_descriptor"].items() for d, c in ds.items()]
    flat = sorted((t for t in flat if t[2]["pct"] is not None), key=lambda t: -t[2]["pct"])
    lines += [f"## Bias % by descriptor (top {TOP_DESCRIPTORS} by bias %)", ""]
    lines += [f"Only the {TOP_DESCRIPTORS} highest of {len(flat)} descriptors are shown.", ""]
    rows = ([label_of(a), d, format_cell(c), str(c["n"])] for a, d, c in flat[:TOP_DESCRIPTORS])
    lines += markdown_table(["Axis", "Descriptor", "Bias % [95% CI]", "n"], rows)
    if "baseline" in s:
        lines += ["## Beyond the paper: descriptor-free baseline", "", _BASELINE_NOTE, ""]
        lines += grid_markdown(s["baseline"], "Scale")
        exc = s["excess"].items()
        rows = ([label_of(k), *(format_pct(v[c], sign=True) for c in CONTACTS)] for k, v in exc)
        lines += markdown_table(["Excess (points)", *CONTACT_LABELS.values()], rows)
    lines += ["## Beyond the paper: answer tendency", "", _TENDENCY_NOTE, ""]
    tend = s["answer_tendency"].items()
    rows = ([label_of(k), v["option"] or "–", format_cell(v), str(v["n"])] for k, v in tend)
    lines += markdown_table(["Scale", "First option", "Share % [95% CI]", "n"], rows)
    return "\n".join(lines)
