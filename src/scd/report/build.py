"""``scd report RUN_DIR``: the tables (Markdown, CSV, JSON), figures and report of a run.

A pure function of the run directory: it reads what ``scd run`` left there (``recipe.json``,
``layout.json`` and the result directories it names) and writes ``tables/``, ``figures/``,
``report.md`` and a self-contained ``report.html``. Each benchmark with results writes its own
section (:meth:`scd.eval.benchmarks.base.Benchmark.report`), in the registry's order; everything
is recomputed from the per-prompt records, so the report of a resumed run equals that of an
uninterrupted one. A run whose jobs are not all done yet (``scd run`` still going, or stopped)
gets the report of what has finished, with a note of what is pending (:func:`finished`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from scd.config.vocabulary import SCD_ARM, RunLayout
from scd.eval.benchmarks import REGISTRY
from scd.eval.benchmarks.tables import markdown_table
from scd.io import read_json
from scd.report.html import anchor
from scd.tracking import offline_folders

__all__ = ["build_report", "finished"]


def _engine(ev: dict[str, Any], ran: dict[str, Any] | None = None) -> str:
    """The engine that ran, as it describes itself: its backend and options, the device and
    dtype it ran on (``ran``, from the base evaluation's summary) rather than what "auto" would
    pick."""
    from scd.eval.engines import ENGINES, engine_class

    if ev["backend"] not in ENGINES:  # an engine this process has not registered
        return f"{ev['backend']} (not registered here)"
    options = engine_class(ev["backend"]).Options
    names = {f.name for f in dataclasses.fields(options)}
    return options(**{k: v for k, v in ev.items() if k in names}).describe(ran or {})


def _adapters(layout: RunLayout) -> list[tuple[str, str]]:
    """(what, directory) of every adapter the run trains: each trained arm's (with its seed
    when the arena trains several), and a setting's SCD adapter when no arm is its."""
    arms = [a for a in layout.get("arms", []) if a["adapter"]]
    seeded = {a["setting"] for a in arms if a["arm"] == SCD_ARM}
    out = [
        (f"setting {n}", i["adapter"])
        for n, i in layout["settings"].items()
        if int(n) not in seeded
    ]
    for a in arms:
        seed = f", seed {a['seed']}" if "seed" in a else ""
        out.append((f"setting {a['setting']}, arm {a['arm']}{seed}", a["adapter"]))
    return out


def _adapter(path: str) -> str:
    """The adapter's directory and the first 12 hex digits of its weights' sha256."""
    from scd.io import sha256_file

    weights = Path(path) / "adapter_model.safetensors"
    if not weights.is_file():
        return f"`{path}` (not written yet)"
    return f"`{path}` (sha256 `{sha256_file(weights)[:12]}`)"


def _seeds(recipe: dict[str, Any]) -> str:
    seeds = (recipe.get("arena") or {}).get("seeds")
    if seeds and len(seeds) > 1:
        return "seeds " + ", ".join(str(s) for s in seeds) + " (each trained arm once per seed)"
    return f"seed {seeds[0] if seeds else recipe['train']['seed']}"


def _header(recipe: dict[str, Any], layout: RunLayout) -> list[str]:
    """What a reader needs before the numbers: when, with what, on what, how much."""
    import datetime

    from scd import __version__

    d, t, lora, ev = recipe["data"], recipe["train"], recipe["lora"], recipe["eval"]
    built = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    loaded = f"loaded from `{layout['model']}`, fingerprint `{layout.get('fingerprint', '–')}`"
    rows = [
        ("Report built", built),
        ("scd", __version__),
        ("Model", f"`{recipe['model']}` ({loaded})"),
    ]
    toy = Path(layout["model"]) / "toy_model.json"
    if toy.is_file():
        axes = ", ".join(read_json(toy)["bias_axes"]) or "none"
        rows.append(("Planted bias (toy model)", f"{axes}: these axes get the biased answer"))
    rows += [(f"Adapter, {what}", _adapter(path)) for what, path in _adapters(layout)]
    epochs = t["num_train_epochs"]
    steps = (
        f"{t['max_steps']} steps"
        if t["max_steps"] > 0
        else f"{epochs:g} epoch" + ("" if epochs == 1 else "s")
    )
    training = (
        f"LoRA r={lora['r']}, alpha={lora['alpha']}, dropout={lora['dropout']}; {steps}, batch "
        f"{t['per_device_train_batch_size']} x {t['gradient_accumulation_steps']}, lr "
        f"{t['learning_rate']:g} ({t['lr_scheduler_type']}, warmup {t['warmup_steps']:g}); "
        f"quantization {recipe['quantization']}; {_seeds(recipe)}"
    )
    sft = (
        f"descriptors `{d['descriptors'] or d['prompts']}`; up to {d['max_train']:,} train / "
        f"{d['max_eval']:,} eval rows per contact type; {d['general_fraction']:.0%} general "
        f"instructions; style {d['style']}"
    )
    rows += [("Training", training), ("SFT data", sft)]
    base = {  # the base model's results
        name: read_json(Path(out) / "summary.json")
        for name, out in layout["base"].items()
        if (Path(out) / "summary.json").is_file()
    }
    prompts = Path(layout["prompts"]) / "manifest.json"
    if prompts.is_file():
        m = read_json(prompts)
        text = (
            f"{m['n_prompts']:,} prompts in {m['n_sets']:,} sets over {m['n_descriptors']} "
            "descriptors"
        )
        for name, summary in base.items():  # what the base model answered of them
            note = REGISTRY[name].prompts_note(summary, ev[name]) if name in REGISTRY else None
            text += f"; {note}" if note else ""
        rows.append(("Contact prompts", text))
    ran = None  # what the engine ran on, as the first base evaluation that says so recorded it
    for summary in base.values():
        ran = ran or summary.get("run", {}).get("ran")
    rows.append(("Engine", _engine(ev, ran)))
    return ["| About this run | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]


def _unfinished(pending: list[str], run_dir: Path) -> list[str]:
    """A note at the top of the report of a run with results still to come."""
    if not pending:
        return []
    names = [
        str(Path(p).relative_to(run_dir)) if Path(p).is_relative_to(run_dir) else p for p in pending
    ]
    shown = ", ".join(f"`{n}`" for n in names[:12])
    more = (
        f" and {len(names) - 12} more (layout.json lists every result)" if len(names) > 12 else ""
    )
    return [
        f"**This run has not finished**: {len(names)} result{'s' if len(names) > 1 else ''} "
        f"pending ({shown}{more}). The tables below hold the finished ones only: a seeded arm's "
        "value is the mean over its seeds that have it (the cell says of how many), and "
        "Holm-corrected p-values are over the arms finished so far (more arms can only raise "
        "them). "
        "`scd report` again once `scd run` is done.",
        "",
    ]


def _has_results(name: str, layout: RunLayout) -> bool:
    return name in layout["base"] or any(name in s["evals"] for s in layout["settings"].values())


def finished(layout: RunLayout) -> tuple[RunLayout, list[str]]:
    """``layout`` with only the results that have finished (a result directory holding its
    ``summary.json``; a steering search its ``steer.json``, an eraser's search its
    ``erase.json``), and the directories left out (each once). An arm with no finished result
    leaves the arena; the base model's row stays; the
    layout's ``unfinished`` names the jobs whose results were left out (as the layout's ``base``
    and ``evals`` name them: a benchmark, or ``bias_eval_prompts``)."""
    pending: list[str] = []

    def done(path: str | None, file: str = "summary.json") -> bool:
        if path and not (Path(path) / file).is_file():
            pending.append(path)
            return False
        return bool(path)

    unfinished: set[str] = set()  # the jobs with a result left out

    def evals(of: dict[str, str]) -> dict[str, str]:
        kept = {k: v for k, v in of.items() if done(v)}
        unfinished.update(of.keys() - kept.keys())
        return kept

    out: RunLayout = {**layout, "base": evals(layout["base"])}  # type: ignore[typeddict-item]
    out["settings"] = {n: {**s, "evals": evals(s["evals"])} for n, s in layout["settings"].items()}
    if "arms" in layout:
        arms = []
        for a in layout["arms"]:
            arm = {**a, "evals": evals(a["evals"])}
            arm["capability"] = a["capability"] if done(a["capability"]) else None
            for key, file in (("steer", "steer.json"), ("erase", "erase.json")):
                if key in a and not done(a[key], file):
                    del arm[key]
            if (
                a["arm"] == "base"
                or arm["evals"]
                or arm["capability"]
                or {"steer", "erase"} & set(arm)
            ):
                arms.append(arm)
        out["arms"] = arms  # type: ignore[typeddict-item]
    if unfinished:
        out["unfinished"] = sorted(unfinished)
    return out, list(dict.fromkeys(pending))  # a setting's SFT results are its arm's too


def build_report(run_dir: Path | str) -> tuple[Path, Path]:
    """Write the tables, figures, ``report.md`` and ``report.html`` of a run directory."""
    from scd.eval.benchmarks.captions import number_figures
    from scd.report.html import write_report

    run_dir = Path(run_dir)
    recipe = read_json(run_dir / "recipe.json")["recipe"]
    planned = read_json(run_dir / "layout.json")  # every result, finished or not
    layout, pending = finished(planned)
    tables = run_dir / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    figures: dict[str, bytes] = {}
    lines = [
        f"# SCD run `{run_dir.name}`",
        "",
        *_header(recipe, planned),  # each adapter, hashed once its training has finished
        "",
        "Before/after cells are bias % on the same held-out prompts; the base model is evaluated "
        "once on every prompt of its subset and sliced per setting. The tables are also in "
        "`tables/` as CSV and JSON (with 95% Wilson intervals).",
        "",
        *_unfinished(pending, run_dir),
    ]
    body = _training(planned, figures)  # every finished training, evaluated yet or not
    if layout.get("arms"):
        from scd.report.arena import arena_section

        unit = (recipe.get("arena") or {}).get("cluster_unit", "template")
        body += arena_section(layout, tables, figures, unit)
        from scd.report.erasure import erasure_section
        from scd.report.steering import steering_section

        body += steering_section(layout, tables, figures)
        body += erasure_section(layout, tables)
    for name, bench in REGISTRY.items():
        if _has_results(name, layout):
            body += bench.report(layout, tables, figures)
    headings = [x[3:].strip() for x in "\n".join(body).splitlines() if x.startswith("## ")]
    contents = ["## Contents", "", *(f"- [{h}](#{anchor(h)})" for h in headings), ""]
    text = number_figures("\n".join(lines + contents + body))  # 1, 2, 3, ... in their order
    return write_report(run_dir, f"SCD run {run_dir.name}", text, figures)


def _training(layout: RunLayout, figures: dict[str, bytes]) -> list[str]:
    """Each setting's training: steps, time, speed, losses, its W&B run; the loss curves."""
    from scd.eval.benchmarks.captions import FIGURE
    from scd.report.loss import loss_png

    rows, curves, kept = [], {}, []
    trained = [(str(n), info["adapter"]) for n, info in layout["settings"].items()]  # SCD's
    trained += [
        (f"{a['setting']} {a['arm']}", a["adapter"])
        for a in layout.get("arms", [])
        if a["adapter"] and a["arm"] != SCD_ARM
    ]
    for n, adapter in trained:
        path = Path(adapter) / "train_manifest.json"
        if not path.is_file():
            continue
        m = read_json(path)
        history = [(e["step"], e["loss"]) for e in m.get("log_history", [])]
        curves[f"Setting {n}"] = history
        wandb = m.get("wandb_run_id") or "–"
        segments = Path(adapter) / "wandb"
        if offline_folders(segments, wandb):  # every process's folder of the run
            wandb += f" (offline: `wandb sync {segments}/offline-run-*-{wandb}*`)"
        resumed = f", resumed from {m['resumed_from']}" if m.get("resumed_from") else ""
        final = f"{history[-1][1]:.4f}" if history else "–"
        chosen = m.get("selected") or {"step": m["global_step"], "rule": "last"}
        rows.append(
            [
                n,
                f"{m['global_step']:,}{resumed}",
                f"{m['train_seconds']:.0f} s",
                f"{m.get('tokens_per_second') or 0:,.0f}",
                final,
                f"{m['train_loss']:.4f}",
                f"{chosen['step']:,} ({chosen['rule']})",
                wandb,
            ]
        )
        if chosen.get("why") and chosen["rule"] == "best":
            kept.append(f"- Setting {n}: step {chosen['step']:,} kept: {chosen['why']}.")
    if not rows:
        return []
    head = [
        "Setting",
        "Steps",
        "Time (this session)",
        "Tokens/s",
        "Final loss",
        "Mean loss (all steps)",
        "Adapter of step",
        "W&B run",
    ]
    lines = ["## Training", "", *markdown_table(head, rows), *kept, *([""] if kept else [])]
    if any(curves.values()):
        figures["loss"] = loss_png(curves, title="Training loss")
        lines += [
            "{{figure:loss}}",
            "",
            f"*{FIGURE}. Training loss by step, per setting (the "
            "mean loss of each logging interval).*",
            "",
        ]
    return lines
