"""``scd report RUN_DIR``: the tables (Markdown, CSV, JSON), figures and report of a run.

Reads what ``scd run`` left in the run directory (``run.json``, ``layout.json`` and the result
directories it names) and writes ``tables/``, ``figures/``, ``report.md`` and a self-contained
``report.html``. Everything is recomputed from the per-prompt records, so the report of a resumed
run equals that of an uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from scd.data_gen.settings import load_settings
from scd.errors import InputError
from scd.eval.metrics import CONTACTS, SCALES, SCENARIOS, grid_markdown
from scd.io import json_text
from scd.report.tables import (
    TRANSFER_TABLES,
    before_after,
    bias_frame,
    table10_frame,
    table_markdown,
    transfer_frame,
)

__all__ = ["build_report"]

CONTACT_NAMES = {
    "none": "No contact",
    "positive": "Positive contact",
    "negative": "Negative contact",
}


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"{path}: missing (is {path.parent} a finished `scd run` directory?)")
    return json.loads(path.read_text())


def _save(tables_dir: Path, name: str, frame: pd.DataFrame, markdown: str) -> None:
    tables_dir.mkdir(parents=True, exist_ok=True)
    frame.to_csv(tables_dir / f"{name}.csv", index=False)
    (tables_dir / f"{name}.json").write_text(frame.to_json(orient="records", indent=1))
    (tables_dir / f"{name}.md").write_text(markdown + "\n")


def _ordered(grid: dict, rows: tuple = (), cols: tuple = ()) -> dict:
    """``grid`` (read back from sorted-key JSON) in the paper's row and column order."""

    def order(keys: list[str], known: tuple) -> list[str]:
        return [k for k in known if k in keys] + [k for k in keys if k not in known]

    return {r: {c: grid[r][c] for c in order(list(grid[r]), cols)} for r in order(list(grid), rows)}


def _grid_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Bias % by axis (rows) x scenario (columns)."""
    grid = frame.assign(biased=frame["biased"].astype(float)).pivot_table(
        index="axis", columns="scenario", values="biased", aggfunc="mean"
    )
    return 100 * grid


def _pairs(layout: dict, base: dict[str, pd.DataFrame]) -> dict[int, tuple]:
    pairs = {}
    for key, info in layout["settings"].items():
        if "bias" not in info["evals"]:
            continue
        n = int(key)
        ids = pq.read_table(
            Path(info["sft"]) / "heldout" / "prompts.parquet", columns=["prompt_id"]
        )
        source = base["bias_eval_prompts" if n == 2 else "bias"]
        pairs[n] = before_after(
            source, bias_frame(info["evals"]["bias"]), ids["prompt_id"].to_pylist()
        )
    return pairs


def _bias_sections(layout: dict, tables: Path, figures: dict[str, bytes]) -> list[str]:
    from scd.report.figures import figure1_png, figure2_png

    settings = load_settings()
    base = {
        k: bias_frame(layout["base"][k])
        for k in ("bias", "bias_eval_prompts")
        if k in layout["base"]
    }
    pairs = _pairs(layout, base)
    lines: list[str] = []
    if pairs:
        t10 = table10_frame(pairs)
        md = table_markdown(t10, "Table 10: bias % before and after SCD tuning, per setting")
        _save(tables, "table10", t10, md)
        fig = t10.assign(setting=[f"Setting {n}" for n in t10["setting"]])
        fig = fig.rename(columns={"before_pct": "before", "after_pct": "after"})
        figures["figure1"] = figure1_png(fig[["setting", "contact", "before", "after"]])
        lines += ["{{figure:figure1}}", "", md]
        descriptions = {n: s.description for n, s in settings.items()}
        for n, info in layout["settings"].items():  # what the setting really used, if less
            manifest = Path(info["sft"]) / "manifest.json"
            if manifest.is_file():
                descriptions[int(n)] = _read_json(manifest).get("description", descriptions[int(n)])
        for dim, (number, title) in TRANSFER_TABLES.items():
            frame = transfer_frame(dim, pairs, settings)
            if frame is not None:
                md = table_markdown(frame, title, row_key="value", descriptions=descriptions)
                _save(tables, f"table{number}", frame, md)
                lines += [md]
        first = min(pairs)
        before, after = pairs[first]
        figures["figure2_heldout"] = figure2_png(
            _grid_frame(before), _grid_frame(after),
            titles=(f"Before (setting {first}, held-out)", f"After (setting {first}, held-out)"),
        )  # fmt: skip
    if "bias" in base:
        summary = _read_json(Path(layout["base"]["bias"]) / "summary.json")
        figures["figure2"] = figure2_png(
            _grid_frame(base["bias"]), titles=("Base model: bias % by axis and scenario",)
        )
        md = ["## Table 1: the base model, bias % by scale and contact", ""]
        table1 = _ordered(summary["table1"], SCALES, CONTACTS)
        md += grid_markdown(table1, "Scale")
        rows = [
            {"scale": s, "contact": c, **cell}
            for s, row in table1.items()
            for c, cell in row.items()
        ]
        _save(tables, "table1", pd.DataFrame(rows), "\n".join(md))
        lines += ["\n".join(md), "{{figure:figure2}}", ""]
        for number, scale in enumerate(SCALES, start=3):
            grid = summary["axis_by_scenario"].get(scale)
            if not grid:
                continue
            grid = _ordered(grid, (), SCENARIOS)
            title = (
                f"## Table {number}: the base model, {scale} prompts, bias % by axis and scenario"
            )
            md = [title, "", *grid_markdown(grid, "Axis")]
            rows = [
                {"axis": a, "scenario": s, **cell} for a, r in grid.items() for s, cell in r.items()
            ]
            _save(tables, f"table{number}", pd.DataFrame(rows), "\n".join(md))
            lines.append("\n".join(md))
    if pairs:
        lines += ["{{figure:figure2_heldout}}", ""]
    return lines


def _bbq_bar(block: dict[str, Any]) -> dict[str, float]:
    def value(x: Any) -> float:
        return float("nan") if x is None else float(x)

    def acc(key: str) -> float:
        return value(block[key]["accuracy"] if block.get(key) else None)

    return {
        "accuracy_ambig": acc("accuracy_ambiguous"),
        "accuracy_disambig": acc("accuracy_disambiguated"),
        "bias_ambig": value(block["s_amb"]),
        "bias_disambig": value(block["s_dis"]),
    }


def _bbq_sections(layout: dict, tables: Path, figures: dict[str, bytes]) -> list[str]:
    from scd.eval.bbq import table15, table15_data
    from scd.report.figures import bbq_bars_png

    dirs = {"Without FT": layout["base"]["bbq"]}
    dirs.update(
        {
            f"Setting {n}": i["evals"]["bbq"]
            for n, i in layout["settings"].items()
            if "bbq" in i["evals"]
        }
    )
    data = table15_data(dirs)
    md = table15(dirs)
    rows = []
    for r in data["rows"]:
        for c in data["columns"]:
            acc = (r["details"].get(c) or {}).get("accuracy") or {}
            ci = acc.get("ci95") or [None, None]
            rows.append({"model": r["name"], "category": c, "n": r["n"][c],
                         "accuracy": r["accuracy"][c], "accuracy_ci_low": ci[0],
                         "accuracy_ci_high": ci[1], "s_dis": r["s_dis"][c],
                         "s_amb": r["s_amb"][c]})  # fmt: skip
    _save(tables, "table15", pd.DataFrame(rows), md)
    bars = []
    for name, d in dirs.items():
        summary = _read_json(Path(d) / "summary.json")
        for cat, block in summary["by_category"].items():
            bars.append({"category": cat, "model": name, **_bbq_bar(block)})
    figures["bbq"] = bbq_bars_png(pd.DataFrame(bars))
    return [md, "{{figure:bbq}}", ""]


def _stigma_sections(layout: dict, tables: Path) -> list[str]:
    from scd.eval.stigma import stigma_table, stigma_table_data

    lines = []
    for name in sorted(k for k in layout["base"] if k.startswith("stigma-")):
        dirs = {"Base": layout["base"][name]}
        dirs.update(
            {
                f"Setting {n}": i["evals"][name]
                for n, i in layout["settings"].items()
                if name in i["evals"]
            }
        )
        md = stigma_table(dirs)
        data = stigma_table_data(dirs)
        (tables / f"{name}.json").write_text(json_text(data))
        (tables / f"{name}.md").write_text(md + "\n")
        lines += [md, ""]
    return lines


def build_report(run_dir: Path | str) -> tuple[Path, Path]:
    """Write the tables, figures, ``report.md`` and ``report.html`` of a run directory."""
    from scd.report.html import write_report

    run_dir = Path(run_dir)
    pinned = _read_json(run_dir / "run.json")
    layout = _read_json(run_dir / "layout.json")
    recipe = pinned["recipe"]
    tables = run_dir / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    figures: dict[str, bytes] = {}
    settings = ", ".join(layout["settings"])
    data = recipe["data"]["descriptors"] or recipe["data"]["prompts"]
    lines = [
        f"# SCD run `{run_dir.name}`",
        "",
        f"Model `{recipe['model']}` (`{layout['model']}`); prompts `{data}`; settings {settings}; "
        f"LoRA r={recipe['lora']['r']}; quantization {recipe['quantization']}.",
        "",
        "Before/after cells are bias % on the same held-out prompts; the base model is evaluated "
        "once on every prompt and sliced per setting. The tables are also in `tables/` as CSV "
        "and JSON.",
        "",
    ]
    if any(k.startswith("bias") for k in layout["base"]):
        lines += _bias_sections(layout, tables, figures)
    if "bbq" in layout["base"]:
        lines += ["## BBQ", "", *_bbq_sections(layout, tables, figures)]
    if any(k.startswith("stigma-") for k in layout["base"]):
        lines += ["## Stigma probes", "", *_stigma_sections(layout, tables)]
    return write_report(run_dir, f"SCD run {run_dir.name}", "\n".join(lines), figures)
