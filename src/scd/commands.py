"""What each ``scd`` subcommand does: call the library, print a one-line summary.

The parser lives in :mod:`scd.cli` (every command's arguments: :mod:`scd.cli_args`; which function
runs which command: :data:`scd.cli.HANDLERS`); ``scd data``, ``scd audit`` and ``scd export``
keep their handlers beside their arguments (:mod:`scd.cli_data`, :mod:`scd.cli_audit`,
:mod:`scd.cli_export`). Heavy modules are imported inside each handler, so that ``scd --help``
and bad-input errors stay fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from scd.errors import InputError

if TYPE_CHECKING:
    from scd.config.engine import EngineSpec
    from scd.config.schema import Recipe


def _pushable(generate: Callable[[argparse.Namespace], None]) -> Callable:
    """``scd generate ... --push-to-hub REPO``: a token is checked for first, and the directory
    is uploaded once written."""

    def run(args: argparse.Namespace) -> None:
        if args.push_to_hub:
            from scd.hub import hub_token

            hub_token(key="push_to_hub")
        generate(args)
        if args.push_to_hub:
            from scd.data_gen.card import push_to_hub

            print(f"uploaded {args.out} -> {push_to_hub(args.out, args.push_to_hub)}")

    return run


@_pushable
def generate_contact(args: argparse.Namespace) -> None:
    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import resolve_descriptors

    descriptors = resolve_descriptors(
        args.descriptors,
        version=args.hb_version,
        drop_dispreferred=args.drop_dispreferred,
        noun_phrases=args.noun_phrases,
    )
    info = write_prompts(
        args.out, descriptors, templates_file=args.templates, scales_file=args.scales
    )
    print(
        f"wrote {info['n_prompts']:,} prompts in {info['n_sets']:,} sets "
        f"({info['n_descriptors']} descriptors) to {args.out}/prompts.parquet"
    )


@_pushable
def generate_stigma(args: argparse.Namespace) -> None:
    from scd.data_gen.stigma_probes import generate_stigma

    info = generate_stigma(
        args.out,
        limit_conditions=args.limit_conditions,
        conditions_file=args.conditions,
        sds_file=args.sds_templates,
        aq27_file=args.aq27,
        language=args.language,
    )
    n = info["n_rows"]
    if args.language != "en":
        print(f"wrote {n['aq27']:,} AQ-27 prompts ({args.language}) to {args.out}")
    else:
        print(
            f"wrote {n['sds']:,} SDS, {n['sentiment']:,} sentiment and {n['aq27']:,} AQ-27 "
            f"prompts ({info['n_forms']} condition forms) to {args.out}"
        )


@_pushable
def generate_sft(args: argparse.Namespace) -> None:
    from scd.config.options import flag_values
    from scd.config.schema import SFTOptions
    from scd.data_gen.sft import write_sft
    from scd.models.protocols import training_protocol
    from scd.progress import say

    options = flag_values(args, SFTOptions)
    info = write_sft(
        args.prompts,
        args.setting,
        args.out,
        eval_prompts=args.eval_prompts,
        protocol=training_protocol(args.protocol),
        **options,
    )
    for warning in info["warnings"]:
        say(f"scd: warning: {warning}")
    c = info["counts"]
    print(
        f"setting {args.setting}: {c['train']:,} train / {c['eval']:,} eval SFT rows, "
        f"{c['heldout_prompts']:,} held-out prompts -> {args.out}"
    )


def stigma_probes() -> list[str]:
    """The registered stigma probes (``scd eval stigma --probe P`` is ``scd eval P``)."""
    from scd.eval.benchmarks import REGISTRY
    from scd.eval.benchmarks.stigma.common import StigmaProbe

    return [name for name, b in REGISTRY.items() if isinstance(b, StigmaProbe)]


def _engine_from_flags(args: argparse.Namespace) -> EngineSpec:
    """The options of the engine ``--backend`` names, from its flags; a flag of another engine
    is refused (naming whose it is)."""
    import dataclasses

    from scd.eval.engines import ENGINES, engine_class, engine_spec

    own = {f.name for f in dataclasses.fields(engine_class(args.backend).Options)} - {"backend"}
    values = {name: getattr(args, name, None) for name in own}  # None: no flag on this command
    for engine in ENGINES:  # the flags of the other engines the command offers
        for f in dataclasses.fields(engine_class(engine).Options):
            value = getattr(args, f.name, None)
            if f.name not in own and f.name != "backend" and value is not None:
                values[f.name] = value  # engine_spec refuses it, naming its engine
    return engine_spec(args.backend, **values)


def evaluate(args: argparse.Namespace) -> None:
    """``scd eval <benchmark>``: its options from its flags, the engine's from theirs (an option
    of another engine is refused when its options are made)."""
    import dataclasses

    from scd.config.options import flag_values
    from scd.eval.benchmarks import REGISTRY

    bench = REGISTRY[args.probe if args.what == "stigma" else args.what]
    options = flag_values(args, bench.Options)
    if args.what == "stigma":  # the alias has every probe's flags: another probe's is refused
        for probe in stigma_probes():
            for f in dataclasses.fields(REGISTRY[probe].Options):
                value = getattr(args, f.name, f.default)
                if f.name not in options and f.metadata.get("flag") and value != f.default:
                    raise InputError(
                        f"an option of the {probe} probe, not of {bench.name}",
                        key=f.name,
                        value=value,
                    )
    engine = _engine_from_flags(args)
    summary = bench.evaluate(
        args.model,
        args.out,
        adapter=args.adapter,
        engine=engine,
        progress=not args.quiet,
        **options,
    )
    print(f"{bench.describe(summary)} -> {args.out}/tables.md")
    if args.wandb:
        from scd.report.wandb_log import log_evaluation

        log_evaluation(bench, args.out, summary, args.wandb_project)


def report(args: argparse.Namespace) -> None:
    """``scd report RUN_DIR``, or ``scd report <benchmark> --runs NAME=DIR ...``: one table over
    several result dirs."""
    from pathlib import Path

    from scd.eval.benchmarks import REGISTRY, get
    from scd.io import json_text

    if args.target not in (*REGISTRY, "stigma"):
        if args.runs or args.out:
            raise InputError(
                "--runs/--out go with `scd report <benchmark>`; `scd report RUN_DIR` has none"
            )
        from scd.pipeline.migrate import migrate_run
        from scd.report.build import build_report

        migrate_run(args.target)  # an earlier scd's run: SCD's arm into setting-N/arm-sft
        md, html = build_report(Path(args.target))
        print(f"report -> {md}, {html}")
        return
    if not args.runs:
        raise InputError(f"scd report {args.target}: --runs NAME=DIR [NAME=DIR ...] is required")
    runs = {}
    for item in args.runs:
        name, sep, path = item.partition("=")
        if not sep:  # a bare DIR is named by its last part
            name, path = Path(item).name, item
        if not name or not path:
            raise InputError(f"--runs {item}: expected NAME=DIR or DIR (e.g. 'base=out/base')")
        if name in runs:
            raise InputError(f"--runs {item}: the name {name!r} is given twice; use NAME=DIR")
        runs[name] = Path(path)
    if args.target == "stigma":  # one probe's runs, or mlm runs with sentiment runs
        from scd.eval.benchmarks.stigma.tables import pooled_stigma_table, runs_by_probe

        probes = runs_by_probe(runs)
        one = len(probes) == 1
        table = get(next(iter(probes))).table(runs) if one else pooled_stigma_table(probes)
    else:
        table = get(args.target).table(runs)
    if not args.out:
        print(table.markdown)
    elif args.out.endswith(".md"):
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)  # as every other --out
        out.write_text(table.markdown)
        out.with_suffix(".json").write_text(json_text(table.rows))
        print(f"{args.target} table -> {out}")
    else:  # a report directory: report.md, report.html with the figures, tables/
        from scd.eval.benchmarks.tables import save_table
        from scd.report.html import write_report

        md, html = write_report(
            args.out, f"scd report {args.target}", table.markdown, table.figures
        )
        save_table(Path(args.out) / "tables", table)
        print(f"{args.target} report -> {md}, {html}")


def _load_recipe(args: argparse.Namespace) -> Recipe:
    """The recipe of ``scd train|run``, its renamed keys and surprises said once (rank 0)."""
    import os
    import sys

    from scd.config.checks import recipe_warnings
    from scd.pipeline.recipe import load_recipe

    main = os.environ.get("RANK", "0") == "0"  # once under torchrun / accelerate
    say = (lambda m: print(f"scd: warning: {m}", file=sys.stderr)) if main else (lambda m: None)
    recipe = load_recipe(args.recipe, args.set, say=say)
    for warning in recipe_warnings(recipe):
        say(warning)
    return recipe


def run(args: argparse.Namespace) -> None:
    from pathlib import Path

    from scd.pipeline.launch import run_recipe

    recipe = _load_recipe(args)
    run_id = args.run_id or recipe.run.name or Path(args.recipe).stem
    if not run_id or "/" in run_id or run_id in (".", "..", "cache"):
        raise InputError(f"--run-id {run_id!r}: expected a plain directory name other than cache")
    if args.address and args.launcher != "ray":
        raise InputError("--address goes with --launcher ray")
    outputs = Path(args.outputs)
    run_recipe(
        recipe,
        outputs / run_id,
        outputs / "cache",
        progress=not args.no_progress,
        launcher=args.launcher,
        address=args.address,
    )


def toy_model(args: argparse.Namespace) -> None:
    from scd.models.toy import build_toy_model

    axes = tuple(a.strip() for a in args.bias_axes.split(",") if a.strip())
    info = build_toy_model(
        args.out, bias_axes=axes, seed=args.seed, progress=True, steer_layer=args.steer_layer
    )
    print(
        f"toy model with planted bias on {', '.join(axes) or 'no axis'} -> {args.out} "
        f"({info.get('train_seconds', 0):.0f} s)"
    )


def train(args: argparse.Namespace) -> None:
    import dataclasses
    from pathlib import Path

    from scd.train.trainer import train

    recipe = _load_recipe(args)
    if recipe.train.push_to_hub:  # before any work
        from scd.hub import hub_token

        hub_token(key="train.push_to_hub")
    changes = {}
    if recipe.output_dir is None:  # as scd run names its runs
        name = recipe.run.name or Path(args.recipe).stem
        changes["output_dir"] = str(Path(args.outputs) / "train" / name)
        print(f"output_dir: {changes['output_dir']}")
    if recipe.model == "toy":  # built once and cached, shared with scd run
        from scd.models.toy import ensure_toy_model

        cache, toy = Path(args.outputs) / "cache", recipe.toy_model
        path = ensure_toy_model(
            toy.bias_axes, toy.seed, cache, progress=True, steer_layer=toy.steer_layer
        )
        changes["model"] = str(path)
    recipe = dataclasses.replace(recipe, **changes)
    info = train(
        recipe,
        method=args.method,
        resume=args.resume,
        use_wandb=not args.no_wandb,
        verbose=args.verbose,
    )
    if info:  # a rate only where tokens were counted (a DPO/KTO batch has no input_ids)
        rate = info.get("tokens_per_second")
        speed = f", {rate} tokens/s" if rate else ""
        print(
            f"trained {info['global_step']} steps, loss {info['train_loss']:.4f}{speed} "
            f"-> {recipe.output_dir}"
        )
    if info and recipe.train.push_to_hub:  # the main process, once the adapter is written
        from scd.report.model_card import push_adapter

        t = recipe.train
        url = push_adapter(recipe.output_dir, t.hub_model_id, private=t.hub_private_repo)
        print(f"uploaded {recipe.output_dir} with its model card -> {url}")


def merge(args: argparse.Namespace) -> None:
    from scd.train.merge import merge_adapter

    info = merge_adapter(args.adapter, args.out, base=args.base)
    print(
        f"wrote {args.out}: base {info['base_model']} + adapter {args.adapter}, merged "
        "(both inputs unchanged)"
    )


def fetch_model(args: argparse.Namespace) -> None:
    from scd.models.catalog import fetch_model
    from scd.progress import say  # stderr: stdout holds only the answer

    print(fetch_model(args.name, prefer_hub=not args.no_hub, say=say))


def quickstart(args: argparse.Namespace) -> None:
    from scd.quickstart import run_quickstart

    run_quickstart(args.out)
