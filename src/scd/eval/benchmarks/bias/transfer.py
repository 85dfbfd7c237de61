"""The run-level tables: before/after SCD tuning per setting (Table 10) and the cross-setting
transfer tables (Tables 11-14), as tidy frames (saved as CSV/JSON) and Markdown.

"Before" and "after" are always measured on the same prompts: a setting's held-out descriptor
prompts that both the base-model evaluation and the tuned-model evaluation answered (the base model
is evaluated once, on the whole prompt set, and sliced per setting). Cells are bias % with a 95%
Wilson interval; ``n`` is the number of prompts in the cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from scd.config.settings import Setting
from scd.config.vocabulary import CONTACT_LABELS, CONTACTS
from scd.eval.benchmarks.bias.metrics import bias_table, format_cell, format_pct, label_of
from scd.eval.benchmarks.tables import markdown_table
from scd.eval.records import read_records

__all__ = [
    "TRANSFER_TABLES",
    "before_after",
    "bias_frame",
    "table10_frame",
    "table_markdown",
    "transfer_frame",
]

# the dimension a setting holds out -> the paper's table number and title
TRANSFER_TABLES = {
    "scale": (11, "Table 11: cross-scale transfer (settings 3-5)"),
    "scenario": (12, "Table 12: cross-scenario transfer (setting 6)"),
    "principle": (13, "Table 13: cross-principle transfer (setting 7)"),
    "axis": (14, "Table 14: cross-axis transfer (setting 8)"),
}
CELL = ("pct", "ci_low", "ci_high", "n")


def bias_frame(eval_dir: Path | str) -> pd.DataFrame:
    """The descriptor-prompt records of a finished ``scd eval bias`` directory as a frame."""
    from scd.eval.benchmarks.bias.metrics import records_frame

    frame = records_frame(read_records(Path(eval_dir) / "records.jsonl"))
    return frame[~frame["baseline"]].set_index("prompt_id", drop=False)


def before_after(
    base: pd.DataFrame, tuned: pd.DataFrame, heldout_ids: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The base and tuned records restricted to the held-out prompts that both answered."""
    ids = base.index.intersection(tuned.index).intersection(pd.Index(heldout_ids)).sort_values()
    return base.loc[ids], tuned.loc[ids]


def _cells(frame: pd.DataFrame, keys: list[str], denominator: str) -> pd.DataFrame:
    """Bias % cells per ``keys`` + contact, plus an ``all`` contact row per ``keys``."""
    by_contact = bias_table(frame, [*keys, "contact"], denominator=denominator)
    overall = bias_table(frame, keys, denominator=denominator).assign(contact="all")
    return pd.concat([by_contact, overall], ignore_index=True)


def _pair(
    before: pd.DataFrame, after: pd.DataFrame, keys: list[str], denominator: str
) -> pd.DataFrame:
    b = _cells(before, keys, denominator).set_index([*keys, "contact"])[list(CELL)]
    a = _cells(after, keys, denominator).set_index([*keys, "contact"])[list(CELL)]
    out = b.add_prefix("before_").join(a.add_prefix("after_"), how="outer").reset_index()
    out["change"] = out["after_pct"] - out["before_pct"]
    return out


def table10_frame(
    pairs: dict[int, tuple[pd.DataFrame, pd.DataFrame]], denominator: str = "all"
) -> pd.DataFrame:
    """Table 10: per setting and contact type (and all), bias % before and after tuning."""
    frames = [
        _pair(before, after, [], denominator).assign(setting=n)
        for n, (before, after) in sorted(pairs.items())
    ]
    cols = ["setting", "contact", *(f"{w}_{c}" for w in ("before", "after") for c in CELL)]
    return _order(pd.concat(frames, ignore_index=True)[[*cols, "change"]], ["setting"])


def transfer_frame(
    dimension: str,
    pairs: dict[int, tuple[pd.DataFrame, pd.DataFrame]],
    settings: dict[int, Setting],
    denominator: str = "all",
) -> pd.DataFrame | None:
    """Tables 11-14: for the settings holding out ``dimension``, bias % per held-out value.

    Returns None when no setting of the run holds out that dimension.
    """
    frames = []
    for n, (before, after) in sorted(pairs.items()):
        held = settings[n].eval.get(dimension)
        if not held or len(settings[n].eval) != 1:
            continue
        part = _pair(before, after, [dimension], denominator).rename(columns={dimension: "value"})
        part = part[part["value"].isin(held)]
        part["value"] = pd.Categorical(part["value"], categories=list(held), ordered=True)
        frames.append(part.assign(setting=n, dimension=dimension))
    if not frames:
        return None
    out = pd.concat(frames, ignore_index=True)
    cols = ["setting", "dimension", "value", "contact"]
    rest = [c for c in out.columns if c not in cols]
    out = _order(out[cols + rest], ["setting", "value"])
    out["value"] = out["value"].astype(str)
    return out


def _order(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    contact = pd.Categorical(frame["contact"], categories=[*CONTACTS, "all"], ordered=True)
    frame = frame.assign(_c=contact).sort_values([*keys, "_c"], kind="stable")
    return frame.drop(columns="_c").reset_index(drop=True)


def _cell(row: pd.Series, when: str, ci: bool) -> str:
    pct = row.get(f"{when}_pct")
    if pct is None or pd.isna(pct):
        return "–"
    return format_cell({k: row[f"{when}_{k}"] for k in CELL[:3]}) if ci else format_pct(pct)


def table_markdown(
    frame: pd.DataFrame,
    title: str,
    *,
    row_key: str = "setting",
    descriptions: dict[int, str] | None = None,
    ci: bool = False,
) -> str:
    """The paper's layout: one row per ``row_key`` value, Before/After per contact type.

    Args:
        frame: From :func:`table10_frame` or :func:`transfer_frame`.
        title: The heading.
        row_key: ``setting`` (Table 10) or ``value`` (Tables 11-14, grouped by setting with an
            italic line naming the setting, as in the paper's Table 11).
        descriptions: Setting descriptions for the group lines.
        ci: Show the 95% Wilson interval in every cell (always in the CSV/JSON).
    """
    contacts = [c for c in (*CONTACTS, "all") if c in set(frame["contact"])]
    labels = {**CONTACT_LABELS, "all": "All"}
    head = ["", *(f"{labels[c]} {w}" for c in contacts for w in ("before", "after")), "n"]
    where = "[in brackets]" if ci else "in the CSV/JSON"
    note = (
        f"Bias % of the same held-out prompts before and after tuning (n prompts per row; "
        f"95% Wilson intervals {where})."
    )

    def rows_of(group: pd.DataFrame) -> list[list[str]]:
        rows = []
        for key, sub in group.groupby(row_key, sort=False):
            cells = sub.set_index("contact")
            label = f"Setting {key}" if row_key == "setting" else label_of(key)
            vals = [
                _cell(cells.loc[c], w, ci) if c in cells.index else "–"
                for c in contacts
                for w in ("before", "after")
            ]
            n = int(cells.loc["all", "after_n"]) if "all" in cells.index else 0
            rows.append([label, *vals, f"{n:,}"])
        return rows

    lines = [f"## {title}", "", note, ""]
    groups = list(frame.groupby("setting", sort=False))
    if row_key == "setting":
        return "\n".join(lines + markdown_table(head, [r for _, g in groups for r in rows_of(g)]))
    for setting, group in groups:  # one small table per setting (no rows of empty cells)
        text = (descriptions or {}).get(setting, "")
        lines += [f"**Setting {setting}**" + (f": {text}" if text else ""), ""]
        lines += [*markdown_table(head, rows_of(group)), ""]
    return "\n".join(lines).rstrip()
