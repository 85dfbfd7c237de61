"""The bias benchmark's part of a run report: the settings, Table 10 with the paper's Figure 1,
the transfer Tables 11-14 (and, in an arena, by arm), each setting's held-out heatmaps (the
paper's Figure 2, before and after), and the base model's Table 1, heatmap and Tables 3-5.
Captions number their figures with :data:`~scd.eval.benchmarks.captions.FIGURE` (numbered in the
report's order). Several bias evaluations side by side (``scd report bias --runs``):
:mod:`~scd.eval.benchmarks.bias.runs`.

Everything is recomputed from the per-prompt records, so the report of a resumed run equals that
of an uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from scd.config.settings import load_settings
from scd.config.vocabulary import CONTACT_LABELS, CONTACTS, SCALES, SCENARIO_TABLE_ORDER, RunLayout
from scd.eval.benchmarks.bias.arm_transfer import arm_transfer_tables
from scd.eval.benchmarks.bias.metrics import format_cell, format_pct, grid_markdown
from scd.eval.benchmarks.bias.transfer import (
    TRANSFER_TABLES,
    before_after,
    bias_frame,
    table10_frame,
    table_markdown,
    transfer_frame,
)
from scd.eval.benchmarks.tables import Table, markdown_table, save_table
from scd.io import read_json

__all__ = ["bias_sections"]


def _save(tables: Path, name: str, frame: pd.DataFrame, markdown: str) -> None:
    save_table(tables, Table(markdown, frame.to_dict("records"), name))


def _ordered(grid: dict, rows: tuple = (), cols: tuple = ()) -> dict:
    """``grid`` (read back from sorted-key JSON) in the paper's row and column order."""

    def order(keys: list[str], known: tuple) -> list[str]:
        return [k for k in known if k in keys] + [k for k in keys if k not in known]

    return {r: {c: grid[r][c] for c in order(list(grid[r]), cols)} for r in order(list(grid), rows)}


def _grid_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Bias % by axis (rows) x scenario (columns)."""
    return 100 * frame.assign(biased=frame["biased"].astype(float)).pivot_table(
        index="axis", columns="scenario", values="biased", aggfunc="mean"
    )


def _manifest(info: dict[str, Any]) -> dict[str, Any]:
    """A setting's SFT manifest: the split, description and counts the run really used."""
    path = Path(info["sft"]) / "manifest.json"
    return read_json(path) if path.is_file() else {}


def _pairs(layout: RunLayout, base: dict[str, pd.DataFrame], settings: dict) -> dict[int, tuple]:
    pairs = {}
    for key, info in layout["settings"].items():
        if "bias" not in info["evals"]:
            continue
        n = int(key)
        ids = pq.read_table(
            Path(info["sft"]) / "heldout" / "prompts.parquet", columns=["prompt_id"]
        )
        split = _manifest(info).get("split") or settings[n].split
        job = "bias_eval_prompts" if split == "source" else "bias"
        if job not in base:  # the base model's evaluation has not finished (a run not ended)
            continue
        source = base[job]
        tuned = bias_frame(info["evals"]["bias"])
        pairs[n] = before_after(source, tuned, ids["prompt_id"].to_pylist())
    return pairs


def _settings_table(
    layout: RunLayout, descriptions: dict[int, str], evaluated: dict[int, int]
) -> list[str]:
    """One row per setting: what it trains and evaluates on, and how much data it had."""
    rows = []
    for n, info in layout["settings"].items():
        counts = _manifest(info).get("counts", {})
        held, done = counts.get("heldout_prompts", 0), evaluated.get(int(n), 0)
        rows.append(
            [
                n,
                descriptions.get(int(n), ""),
                f"{counts.get('train', 0):,}",
                f"{held:,}",
                f"{done:,}",
            ]
        )
    head = ["Setting", "Trains on, evaluates on", "SFT rows", "Held-out prompts", "Evaluated"]
    return markdown_table(head, rows)


def _tuned_sections(layout: RunLayout, base: dict, tables: Path, figures: dict) -> tuple:
    """Table 10 with the paper's Figure 1 (the headline), and the per-setting heatmaps with the
    transfer tables (after the base model's sections); Markdown lines of each."""
    from scd.eval.benchmarks.captions import FIGURE, grey_note
    from scd.eval.benchmarks.figures import figure1_png, figure2_png

    settings = load_settings()  # defaults; each setting's SFT manifest says what the run used
    pairs = _pairs(layout, base, settings)
    if not pairs:
        return [], []
    descriptions = {n: s.description for n, s in settings.items()}
    for n, info in layout["settings"].items():  # what the setting really used, if less
        descriptions[int(n)] = _manifest(info).get("description", descriptions.get(int(n)))
    evaluated = {n: len(before) for n, (before, _) in pairs.items()}
    head = ["## The settings", "", *_settings_table(layout, descriptions, evaluated)]
    t10 = table10_frame(pairs)
    md = table_markdown(t10, "Table 10: bias % before and after SCD tuning, per setting", ci=True)
    _save(tables, "table10", t10, md)
    fig = t10.assign(setting=[f"Setting {n}" for n in t10["setting"]]).rename(
        columns={
            f"{w}_{k}": f"{w}{x}"
            for w in ("before", "after")
            for k, x in (("pct", ""), ("ci_low", "_low"), ("ci_high", "_high"))
        }
    )
    figures["figure1"] = figure1_png(
        fig[
            [
                "setting",
                "contact",
                "before",
                "after",
                "before_low",
                "before_high",
                "after_low",
                "after_high",
            ]
        ],
        title="Bias % before and after SCD tuning, on each setting's held-out prompts",
    )
    head += [
        md,
        "",
        "{{figure:figure1}}",
        "",
        f"*{FIGURE}. Bias % before (light) and after (dark) SCD tuning, per setting and "
        "contact type, on each setting's held-out prompts: the same prompts before and "
        "after; error bars: 95% Wilson intervals (n per setting in Table 10; what each "
        "setting trains and evaluates on in the table above). The SCD paper's Figure 1.*",
        "",
    ]
    tail = ["## Each setting's held-out prompts by axis and scenario", ""]
    for n, (before, after) in sorted(pairs.items()):
        name = f"figure2_setting{n}"
        titles = (f"Setting {n}: before", f"Setting {n}: after")
        grids = (_grid_frame(before), _grid_frame(after))
        figures[name] = figure2_png(*grids, titles=titles)
        tail += [
            f"{{{{figure:{name}}}}}",
            "",
            f"*{FIGURE}. Bias % by axis and scenario on setting {n}'s held-out prompts "
            f"({len(before):,}), before and after tuning (the SCD paper's Figure 2)"
            f"{grey_note(*grids)}.*",
            "",
        ]
    for dim, (number, title) in TRANSFER_TABLES.items():
        frame = transfer_frame(dim, pairs, settings)
        if frame is not None:
            md = table_markdown(frame, title, row_key="value", descriptions=descriptions)
            _save(tables, f"table{number}", frame, md)
            tail += [md, ""]
    return head, tail


def _grid_table(tables: Path, name: str, title: str, grid: dict, keys: tuple[str, str]) -> str:
    """A ``grid[row][column]`` of cells as Markdown, saved with its tidy rows as ``name``."""
    md = "\n".join([title, "", *grid_markdown(grid, keys[0].capitalize())])
    rows = [{keys[0]: r, keys[1]: c, **cell} for r, row in grid.items() for c, cell in row.items()]
    _save(tables, name, pd.DataFrame(rows), md)
    return md


def _base_sections(layout: RunLayout, base: dict, tables: Path, figures: dict) -> list[str]:
    from scd.eval.benchmarks.captions import FIGURE, grey_note
    from scd.eval.benchmarks.figures import figure2_png

    summary = read_json(Path(layout["base"]["bias"]) / "summary.json")
    grid = _grid_frame(base["bias"])
    figures["figure2"] = figure2_png(grid, titles=("Base model: bias % by axis and scenario",))
    table1 = _ordered(summary["table1"], SCALES, CONTACTS)
    title = "## Table 1: the base model, bias % by scale and contact"
    lines = [
        _grid_table(tables, "table1", title, table1, ("scale", "contact")),
        "",
        "{{figure:figure2}}",
        "",
        f"*{FIGURE}. The base model's bias % by bias axis and scenario over all "
        f"{len(base['bias']):,} descriptor prompts it answered (Tables 3-5 split it by "
        f"scale; the SCD paper's Figure 2){grey_note(grid)}.*",
        "",
    ]
    for number, scale in enumerate(SCALES, start=3):
        grid = summary["axis_by_scenario"].get(scale)
        if not grid:
            continue
        grid = _ordered(grid, (), SCENARIO_TABLE_ORDER)
        title = f"## Table {number}: the base model, {scale} prompts, bias % by axis and scenario"
        lines.append(_grid_table(tables, f"table{number}", title, grid, ("axis", "scenario")))
    return [*lines, "", *_beyond_the_paper(summary)]


def _beyond_the_paper(summary: dict[str, Any]) -> list[str]:
    """The base model's descriptor-free baseline, its excess over it and its answer tendency."""
    lines = [
        "## Beyond the paper: baselines and answer tendency of the base model",
        "",
        "The same templates with no descriptor: a model that answers by a fixed option "
        "per scale scores about 50% on the paper's metric (half of the prompts have a "
        "negative action); the excess over this baseline is the descriptors' effect.",
        "",
    ]
    if "baseline" in summary:
        lines += grid_markdown(_ordered(summary["baseline"], SCALES, CONTACTS), "Baseline")
        lines += markdown_table(
            ["Excess (points)", *(CONTACT_LABELS[c] for c in CONTACTS)],
            (
                [s.capitalize(), *(format_pct(row.get(c), sign=True) for c in CONTACTS)]
                for s, row in _ordered(summary["excess"], SCALES, ()).items()
            ),
        )
    tendency = _ordered(summary.get("answer_tendency") or {}, SCALES, ())
    lines += markdown_table(
        ["Scale", "First option", "Share choosing it [95% CI]", "n"],
        (
            [s.capitalize(), t["option"] or "–", format_cell(t), f"{t['n']:,}"]
            for s, t in tendency.items()
        ),
    )
    return lines


def bias_sections(layout: RunLayout, tables: Path, figures: dict[str, bytes]) -> list[str]:
    """The bias part of a run report (Markdown lines; tables and figures written alongside)."""
    base = {
        k: bias_frame(layout["base"][k])
        for k in ("bias", "bias_eval_prompts")
        if k in layout["base"]
    }
    head, tail = _tuned_sections(layout, base, tables, figures)
    if "bias" in base:
        head += _base_sections(layout, base, tables, figures)
    for table in arm_transfer_tables(layout, load_settings()):
        save_table(tables, table)
        tail += [table.markdown, ""]
    return head + tail
