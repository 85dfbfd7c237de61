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
from scd.eval.metrics import grid_markdown
from scd.io import json_text
from scd.report.tables import (
    TRANSFER_TABLES,
    before_after,
    bias_frame,
    table10_frame,
    table_markdown,
    transfer_frame,
)
from scd.vocabulary import CONTACTS, SCALES, SCENARIO_TABLE_ORDER, RunLayout

__all__ = ["build_report"]


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


def _pairs(layout: RunLayout, base: dict[str, pd.DataFrame], settings: dict) -> dict[int, tuple]:
    pairs = {}
    for key, info in layout["settings"].items():
        if "bias" not in info["evals"]:
            continue
        n = int(key)
        ids = pq.read_table(
            Path(info["sft"]) / "heldout" / "prompts.parquet", columns=["prompt_id"]
        )
        manifest = Path(info["sft"]) / "manifest.json"  # the split the run used (its settings)
        split = _read_json(manifest)["split"] if manifest.is_file() else settings[n].split
        source = base["bias_eval_prompts" if split == "source" else "bias"]
        pairs[n] = before_after(
            source, bias_frame(info["evals"]["bias"]), ids["prompt_id"].to_pylist()
        )
    return pairs


def _bias_sections(layout: RunLayout, tables: Path, figures: dict[str, bytes]) -> list[str]:
    from scd.report.figures import figure1_png, figure2_png

    settings = load_settings()  # defaults; each setting's SFT manifest says what the run used
    base = {
        k: bias_frame(layout["base"][k])
        for k in ("bias", "bias_eval_prompts")
        if k in layout["base"]
    }
    pairs = _pairs(layout, base, settings)
    lines: list[str] = []
    descriptions = {n: s.description for n, s in settings.items()}
    for n, info in layout["settings"].items():  # what the setting really used, if less
        manifest = Path(info["sft"]) / "manifest.json"
        if manifest.is_file():
            descriptions[int(n)] = _read_json(manifest).get("description", descriptions.get(int(n)))
    if pairs:
        evaluated = {n: len(before) for n, (before, _) in pairs.items()}
        lines += ["## The settings", "", *_settings_table(layout, descriptions, evaluated), ""]
        t10 = table10_frame(pairs)
        md = table_markdown(t10, "Table 10: bias % before and after SCD tuning, per setting")
        _save(tables, "table10", t10, md)
        fig = t10.assign(setting=[f"Setting {n}" for n in t10["setting"]])
        fig = fig.rename(columns={"before_pct": "before", "after_pct": "after"})
        figures["figure1"] = figure1_png(
            fig[["setting", "contact", "before", "after"]],
            title="Bias % before and after SCD tuning, on each setting's held-out prompts",
        )
        lines += [md, "", "{{figure:figure1}}", "",
                  "*Figure 1. Bias % before (light) and after (dark) SCD tuning, per setting and "
                  "contact type, on each setting's held-out prompts: the same prompts before and "
                  "after (n per setting in Table 10; what each setting trains and evaluates on in "
                  "the table above).*", ""]  # fmt: skip
        first = min(pairs)
        before, after = pairs[first]
        figures["figure2_heldout"] = figure2_png(
            _grid_frame(before), _grid_frame(after),
            titles=(f"Before (setting {first}, held-out)", f"After (setting {first}, held-out)"),
        )  # fmt: skip
        caption = (
            f"*Figure 2b. Bias % by axis and scenario on setting {first}'s held-out prompts "
            f"({len(before):,}), before and after tuning; grey: no prompts.*"
        )
        lines += ["{{figure:figure2_heldout}}", "", caption, ""]
        for dim, (number, title) in TRANSFER_TABLES.items():
            frame = transfer_frame(dim, pairs, settings)
            if frame is not None:
                md = table_markdown(frame, title, row_key="value", descriptions=descriptions)
                _save(tables, f"table{number}", frame, md)
                lines += [md, ""]
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
        n = len(base["bias"])
        lines += ["\n".join(md), "", "{{figure:figure2}}", "",
                  f"*Figure 2. The base model's bias % by bias axis and scenario over all {n:,} "
                  "descriptor prompts it answered (Tables 3-5 split it by scale); grey: no "
                  "prompts.*", ""]  # fmt: skip
        for number, scale in enumerate(SCALES, start=3):
            grid = summary["axis_by_scenario"].get(scale)
            if not grid:
                continue
            grid = _ordered(grid, (), SCENARIO_TABLE_ORDER)
            title = (
                f"## Table {number}: the base model, {scale} prompts, bias % by axis and scenario"
            )
            md = [title, "", *grid_markdown(grid, "Axis")]
            rows = [
                {"axis": a, "scenario": s, **cell} for a, r in grid.items() for s, cell in r.items()
            ]
            _save(tables, f"table{number}", pd.DataFrame(rows), "\n".join(md))
            lines.append("\n".join(md))
    return lines


def _settings_table(
    layout: RunLayout, descriptions: dict[int, str], evaluated: dict[int, int]
) -> list[str]:
    """One row per setting: what it trains and evaluates on, and how much data it had."""
    rows = ["| Setting | Trains on, evaluates on | SFT rows | Held-out prompts | Evaluated |",
            "|---|---|---|---|---|"]  # fmt: skip
    for n, info in layout["settings"].items():
        manifest = Path(info["sft"]) / "manifest.json"
        counts = _read_json(manifest)["counts"] if manifest.is_file() else {}
        held, done = counts.get("heldout_prompts", 0), evaluated.get(int(n), 0)
        cells = [n, descriptions.get(int(n), ""), f"{counts.get('train', 0):,}", f"{held:,}",
                 f"{done:,}"]  # fmt: skip
        rows.append("| " + " | ".join(map(str, cells)) + " |")
    return rows


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


def _bbq_sections(layout: RunLayout, tables: Path, figures: dict[str, bytes]) -> list[str]:
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
    n_items = data["rows"][0]["n"]["All"] if data["rows"] else 0
    cats = len(data["categories"]) - 1
    figures["bbq"] = bbq_bars_png(
        pd.DataFrame(bars), title=f"BBQ per category ({n_items:,} items, {cats} of 11 categories)"
    )
    caption = (
        f"*Figure 3. BBQ per category and model, on a stratified subset of {n_items:,} items of "
        f"the {cats} categories present: accuracy on ambiguous and disambiguated contexts (top) "
        "and the bias scores s_AMB and s_DIS (bottom; 0 = unbiased, +1 = always the stereotyped "
        "answer, -1 = always the other one).*"
    )
    return [md, "", "{{figure:bbq}}", "", caption, ""]


def _stigma_sections(layout: RunLayout, tables: Path) -> list[str]:
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
        pd.DataFrame(_flat_rows(data)).to_csv(tables / f"{name}.csv", index=False)
        lines += [md, ""]
    return lines


def _fingerprint(path: Path) -> str:
    """The first 12 hex digits of a file's sha256 ("–" when it is missing)."""
    from scd.io import sha256_file

    return sha256_file(path)[:12] if path.is_file() else "–"


def _header(recipe: dict[str, Any], layout: RunLayout[str, Any]) -> list[str]:
    """What a reader needs before the numbers: when, with what, on what, how much."""
    import datetime

    from scd import __version__
    from scd.pipeline.state import model_fingerprint

    d, t, lora, ev = recipe["data"], recipe["train"], recipe["lora"], recipe["eval"]
    built = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    loaded = f"loaded from `{layout['model']}`, fingerprint `{model_fingerprint(layout['model'])}`"
    rows = [("Report built", built), ("scd", __version__),
            ("Model", f"`{recipe['model']}` ({loaded})")]  # fmt: skip
    toy = Path(layout["model"]) / "toy_model.json"
    if toy.is_file():
        axes = ", ".join(_read_json(toy)["bias_axes"]) or "none"
        rows.append(("Planted bias (toy model)", f"{axes}: these axes get the biased answer"))
    for n, info in layout["settings"].items():
        sha = _fingerprint(Path(info["adapter"]) / "adapter_model.safetensors")
        rows.append((f"Adapter, setting {n}", f"`{info['adapter']}` (sha256 `{sha}`)"))
    epochs = f"{t['epochs']:g} epoch" + ("" if t["epochs"] == 1 else "s")
    steps = f"{t['max_steps']} steps" if t["max_steps"] > 0 else epochs
    training = (
        f"LoRA r={lora['r']}, alpha={lora['alpha']}, dropout={lora['dropout']}; {steps}, batch "
        f"{t['batch_size']} x {t['grad_accum']}, lr {t['learning_rate']:g} ({t['lr_scheduler']}, "
        f"warmup {t['warmup_ratio']:g}); quantization {recipe['quantization']}; seed {t['seed']}"
    )
    sft = (
        f"descriptors `{d['descriptors'] or d['prompts']}`; up to {d['max_train']:,} train / "
        f"{d['max_eval']:,} eval rows per contact type; {d['general_fraction']:.0%} general "
        f"instructions; style {d['style']}"
    )
    rows += [("Training", training), ("SFT data", sft)]
    prompts = Path(layout["prompts"]) / "manifest.json"
    if prompts.is_file():
        m = _read_json(prompts)
        text = (
            f"{m['n_prompts']:,} prompts in {m['n_sets']:,} sets over {m['n_descriptors']} "
            "descriptors"
        )
        if "bias" in layout["base"]:
            s = _read_json(Path(layout["base"]["bias"]) / "summary.json")
            limit = ev["bias"]["limit"]
            subset = f"a stratified subset: limit {limit:,}, seed {ev['seed']}" if limit else "all"
            text += (
                f"; the base model answered {s['overall']['n']:,} of them ({subset}) and "
                f"{s['n_baseline_records']:,} descriptor-free baselines"
            )
        rows.append(("Contact prompts", text))
    if "bbq" in layout["base"]:
        s = _read_json(Path(layout["base"]["bbq"]) / "summary.json")
        items = s["overall"]["accuracy"]["n"]
        cats = ", ".join(s["by_category"])
        rows.append(
            (
                "BBQ",
                f"{items:,} items (limit {ev['bbq']['limit']}, stratified) of "
                f"{len(s['by_category'])} categories: {cats}",
            )  # fmt: skip
        )
    engine = f"{ev['backend']}, dtype {ev['dtype']}, batch {ev['batch_size']}"
    if ev["system_prompt"]:
        engine += f', system prompt "{ev["system_prompt"]}"'
    rows.append(("Engine", engine))
    return ["| About this run | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]


def _flat_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A before/after stigma table as tidy rows (one per run and scope) for its CSV."""
    runs = data["runs"]
    if data["probe"] == "aq27":
        rows = [{"run": n, "dimension": "all", **data["overall"][n]} for n in runs]
        return rows + [
            {"run": n, "dimension": d, **by_run[n]}
            for d, by_run in data["dimensions"].items()
            for n in runs
        ]
    rows = [{"run": n, "scope": "gap", **data["gap"][n]} for n in runs]
    rows += [{"run": n, "scope": f"category: {c}", "mean": by_run[n]}
             for c, by_run in data["categories"].items() for n in runs]  # fmt: skip
    rows += [{"run": n, "scope": f"baseline: template {t}", "mean": by_run[n]}
             for t, by_run in data["baseline"].items() for n in runs]  # fmt: skip
    return rows


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
    lines = [
        f"# SCD run `{run_dir.name}`",
        "",
        *_header(recipe, layout),
        "",
        "Before/after cells are bias % on the same held-out prompts; the base model is evaluated "
        "once on every prompt of its subset and sliced per setting. The tables are also in "
        "`tables/` as CSV and JSON (with 95% Wilson intervals).",
        "",
    ]
    if any(k.startswith("bias") for k in layout["base"]):
        lines += _bias_sections(layout, tables, figures)
    if "bbq" in layout["base"]:
        lines += ["## BBQ", "", *_bbq_sections(layout, tables, figures)]
    if any(k.startswith("stigma-") for k in layout["base"]):
        lines += ["## Stigma probes", "", *_stigma_sections(layout, tables)]
    return write_report(run_dir, f"SCD run {run_dir.name}", "\n".join(lines), figures)
