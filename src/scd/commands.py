"""What each ``scd`` subcommand does: call the library, print a one-line summary.

The parser lives in :mod:`scd.cli`; heavy modules are imported inside each handler, so that
``scd --help`` and bad-input errors stay fast.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from scd.errors import InputError

if TYPE_CHECKING:
    from scd.options import EngineSpec
    from scd.train.recipe import Recipe


def _generate_contact(args: argparse.Namespace) -> None:
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


def _generate_stigma(args: argparse.Namespace) -> None:
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
        return
    print(
        f"wrote {n['sds']:,} SDS, {n['sentiment']:,} sentiment and {n['aq27']:,} AQ-27 prompts "
        f"({info['n_forms']} condition forms) to {args.out}"
    )


def _generate_sft(args: argparse.Namespace) -> None:
    from scd.data_gen.sft import write_sft
    from scd.options import SFTOptions

    options = _fields_of(args, SFTOptions)
    info = write_sft(
        args.prompts, args.setting, args.out, eval_prompts=args.eval_prompts, **options
    )
    import sys

    for warning in info["warnings"]:
        print(f"scd: warning: {warning}", file=sys.stderr)
    c = info["counts"]
    print(
        f"setting {args.setting}: {c['train']:,} train / {c['eval']:,} eval SFT rows, "
        f"{c['heldout_prompts']:,} held-out prompts -> {args.out}"
    )


def _eval_bias(args: argparse.Namespace) -> None:
    from scd.eval.bias import evaluate_bias

    summary = evaluate_bias(
        args.model,
        args.prompts,
        args.out,
        adapter=args.adapter,
        engine=_engine_spec(args),
        mode=args.mode,
        limit=args.limit,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        denominator=args.denominator,
        chunk_size=args.chunk_size,
    )
    overall = summary["overall"]
    print(
        f"bias {overall['pct']:.2f}% [{overall['ci_low']:.2f}, {overall['ci_high']:.2f}] "
        f"over {overall['n']:,} descriptor prompts (+{summary['n_baseline_records']:,} "
        f"descriptor-free baselines, reported apart) -> {args.out}/tables.md"
    )


def _fields_of(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The values of the flags generated from ``cls``'s fields (:func:`scd.options.add_options`)."""
    import dataclasses

    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}


def _engine_spec(args: argparse.Namespace) -> EngineSpec:
    """The engine flags as given (None: the engine's default; a flag of the other backend is
    refused when the engine is made)."""
    from scd.options import EngineSpec

    return EngineSpec(**_fields_of(args, EngineSpec))


def _eval_bbq(args: argparse.Namespace) -> None:
    from scd.eval.bbq import evaluate_bbq

    categories = [c.strip() for c in args.categories.split(",")] if args.categories else None
    data = args.data[0] if len(args.data) == 1 else args.data
    summary = evaluate_bbq(
        args.model, data, args.out, adapter=args.adapter, engine=_engine_spec(args),
        categories=categories, limit=args.limit, seed=args.seed, chunk_size=args.chunk_size,
    )  # fmt: skip
    acc = summary["overall"]["accuracy"]
    print(f"BBQ accuracy {acc['accuracy']:.3f} over {acc['n']:,} items -> {args.out}/tables.md")


def _eval_stigma(args: argparse.Namespace) -> None:
    from scd.eval.stigma import evaluate_stigma

    summary = evaluate_stigma(
        args.probe,
        args.model,
        args.prompts,
        args.out,
        adapter=args.adapter,
        engine=_engine_spec(args),
        seed=args.seed,
        chunk_size=args.chunk_size,
        top_k=args.top_k,
        lexicon=args.lexicon,
        negative_label=args.negative_label,
        mlm_run=args.mlm_run,
    )
    if "gap" in summary:
        g = summary["gap"]
        fmt = lambda x: "–" if x is None else f"{x:+.3f}"  # noqa: E731
        head = f"gap stigmatized - non-stigmatized {fmt(g['gap'])} [{fmt(g['ci_low'])}, "
        print(f"{head}{fmt(g['ci_high'])}] -> {args.out}/tables.md")
    else:
        o = summary["overall"]
        diff = "–" if o["mean_diff"] is None else f"{o['mean_diff']:+.3f}"
        print(f"mental - physical {diff} over {o['n']} frames -> {args.out}/tables.md")


def _audit_scm(args: argparse.Namespace) -> None:
    from scd.audit.audit import audit_scm

    summary = audit_scm(
        args.corpus, args.out, seeds=args.seeds, encoder=args.encoder,
        encoder_layers=args.encoder_layers, terms=args.terms,
        language=args.language, text_column=args.text_column, aq27_run=args.aq27_run,
        cache=args.cache, device=args.device, batch_size=args.batch_size,
        validate=args.cross_validate, progress=not args.no_progress,
    )  # fmt: skip
    means = ", ".join(f"{kind} {t['warmth']['mean']:+.3f}" for kind, t in summary["types"].items()
                      if t["n"])  # fmt: skip
    print(f"{summary['n_matched']:,} of {summary['n_sentences']:,} sentences mention an illness; "
          f"mean warmth {means} -> {args.out}/tables.md")  # fmt: skip


def _report_tables(args: argparse.Namespace) -> None:
    """``scd report bbq|stigma --runs NAME=DIR ...``: one table over several result dirs."""
    import json
    from pathlib import Path

    if args.target == "bbq":
        from scd.eval.bbq import table15 as table
        from scd.eval.bbq import table15_data as data
    else:
        from scd.eval.stigma import stigma_table as table
        from scd.eval.stigma import stigma_table_data as data
    runs = {}
    for item in args.runs:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--runs {item}: expected NAME=DIR (e.g. 'base=out/base')")
        runs[name] = Path(path)
    text = table(runs)
    if args.out:
        out = Path(args.out)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(data(runs), indent=2) + "\n")
        print(f"{args.target} table -> {out}")
    else:
        print(text)


def _report(args: argparse.Namespace) -> None:
    from pathlib import Path

    if args.target in ("bbq", "stigma"):
        if not args.runs:
            raise InputError(
                f"scd report {args.target}: --runs NAME=DIR [NAME=DIR ...] is required"
            )
        _report_tables(args)
        return
    if args.runs or args.out:
        raise InputError(
            "--runs/--out go with `scd report bbq|stigma`; `scd report RUN_DIR` has none"
        )
    from scd.report.build import build_report

    md, html = build_report(Path(args.target))
    print(f"report -> {md}, {html}")


def _warn_recipe(recipe: Recipe) -> None:
    import os
    import sys

    from scd.train.recipe import recipe_warnings

    if os.environ.get("RANK", "0") == "0":  # once under torchrun / accelerate
        for warning in recipe_warnings(recipe):
            print(f"scd: warning: {warning}", file=sys.stderr)


def _run(args: argparse.Namespace) -> None:
    from pathlib import Path

    from scd.pipeline.runner import run_recipe
    from scd.train.recipe import load_recipe

    recipe = load_recipe(args.recipe, args.set)
    _warn_recipe(recipe)
    run_id = args.run_id or recipe.run.name or Path(args.recipe).stem
    if not run_id or "/" in run_id or run_id in (".", "..", "cache"):
        raise InputError(f"--run-id {run_id!r}: expected a plain directory name other than cache")
    if args.address and args.launcher != "ray":
        raise InputError("--address goes with --launcher ray")
    outputs = Path(args.outputs)
    run_recipe(recipe, outputs / run_id, outputs / "cache", progress=not args.no_progress,
               launcher=args.launcher, address=args.address)  # fmt: skip


def _toy_model(args: argparse.Namespace) -> None:
    from scd.eval.toy_model import build_toy_model

    axes = tuple(a.strip() for a in args.bias_axes.split(",") if a.strip())
    info = build_toy_model(args.out, bias_axes=axes, seed=args.seed, progress=True)
    print(
        f"toy model with planted bias on {', '.join(axes) or 'no axis'} -> {args.out} "
        f"({info.get('train_seconds', 0):.0f} s)"
    )


def _train(args: argparse.Namespace) -> None:
    import dataclasses
    from pathlib import Path

    from scd.train.recipe import load_recipe
    from scd.train.trainer import train

    recipe = load_recipe(args.recipe, args.set)
    _warn_recipe(recipe)
    changes = {}
    if recipe.output_dir is None:  # as scd run names its runs
        name = recipe.run.name or Path(args.recipe).stem
        changes["output_dir"] = str(Path(args.outputs) / "train" / name)
        print(f"output_dir: {changes['output_dir']}")
    if recipe.model == "toy":  # built once and cached, shared with scd run
        from scd.pipeline.runner import ensure_toy_model

        cache = Path(args.outputs) / "cache"
        changes["model"] = str(ensure_toy_model(recipe.toy_model, cache, progress=True))
    recipe = dataclasses.replace(recipe, **changes)
    info = train(recipe, resume=args.resume, use_wandb=not args.no_wandb, verbose=args.verbose)
    if info:
        print(
            f"trained {info['global_step']} steps, loss {info['train_loss']:.4f}, "
            f"{info['tokens_per_second']} tokens/s -> {recipe.output_dir}"
        )


def _merge(args: argparse.Namespace) -> None:
    from scd.train.merge import merge_adapter

    info = merge_adapter(args.adapter, args.out, base=args.base)
    print(
        f"wrote {args.out}: base {info['base_model']} + adapter {args.adapter}, merged "
        "(both inputs unchanged)"
    )


def _fetch_model(args: argparse.Namespace) -> None:
    import sys

    from scd.models.catalog import fetch_model

    say = lambda m: print(m, file=sys.stderr)  # noqa: E731 -- stdout holds only the answer
    print(fetch_model(args.name, prefer_hub=not args.no_hub, say=say))


def _quickstart(args: argparse.Namespace) -> None:
    from scd.quickstart import run_quickstart

    run_quickstart(args.out)
