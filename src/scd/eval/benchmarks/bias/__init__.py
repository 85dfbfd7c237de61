"""``scd eval bias``: bias % on the contact prompts (the SCD paper's benchmark).

In ``scd run`` the base model answers every prompt of the prompt set (Tables 1, 3-5; the second
prompt set of a source split too) and each tuned model its setting's held-out prompts -- the
held-out part of the base model's subset, so "before" and "after" are the same prompts
(Tables 10-14, :mod:`~scd.eval.benchmarks.bias.sections`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scd.config.options import Pin, option, positive
from scd.eval.benchmarks.base import Benchmark, BenchmarkJob, BenchmarkOptions, RunData
from scd.eval.benchmarks.bias.columns import BIAS_COLUMNS
from scd.eval.benchmarks.tables import Table
from scd.eval.tasks import CausalModel

__all__ = ["Bias", "BiasOptions"]


def set_digest(sets: list[str]) -> dict[str, Any]:
    """What stands for a list of prompt set ids in a result's identity: its size and hash."""
    joined = "\n".join(sorted(sets)).encode()
    return {"n": len(set(sets)), "sha256": hashlib.sha256(joined).hexdigest()}


@dataclass
class BiasOptions(BenchmarkOptions):
    """Bias % on contact prompts: ``scd eval bias`` flags, a recipe's ``eval.bias`` keys."""

    enabled: bool = option(
        True,
        "scd run: the base model on every prompt, each tuned model on its held-out part",
        flag=False,
        pin=Pin.NEVER,
    )
    prompts: str | None = option(
        None,
        "directory with prompts.parquet (scd run: its own)",
        required=True,
        key=False,
        pin=Pin.NEVER,  # its prompts.parquet is hashed (Bias.inputs)
    )
    limit: int | None = option(
        None,
        "a stratified, seeded subset of ~N descriptor prompts (whole sets; the baselines "
        "of their templates come on top)",
        check=positive,
    )
    seed: int = option(0, "seed of the --limit subset")
    mode: Literal["choice", "generate"] = option(
        "choice", "choice: the most probable option; generate: greedy text parsed to an option"
    )
    max_new_tokens: int = option(8, "generate mode: tokens to generate", check=positive)
    denominator: Literal["all", "parsed"] = option(
        "all",
        "all: unparsed answers count in the total (the paper); parsed: they don't",
        pin=Pin.SUMMARY,
    )
    chunk_size: int = option(512, "prompts per resumable chunk", check=positive)
    protocol: Literal["scd", "paper", "paper-chat", "paper-verbatim"] = option(
        "scd",
        "how prompts are put and answers chosen: scd (the chat template, summed "
        "log-probs), paper (the SCD paper's code: Llama 2 [INST] text with its default system "
        "prompt, CAPPr's mean log-prob), paper-chat, paper-verbatim (scd.models.protocols)",
        pin=Pin.CHANGED,
        group="protocol",  # a protocol and its rule: both pinned where either is not scd's
    )
    rule: Literal["sum", "mean", "bytes"] | None = option(
        None,
        "choice mode: the option of highest summed, per-token mean or per-byte "
        "log-prob (default: the protocol's)",
        pin=Pin.CHANGED,
        group="protocol",
    )
    protocols: list[str] | None = option(
        None,
        "score the same prompts under each of these protocols (e.g. scd,paper) into "
        "OUT/<protocol>/, each paired with the first in OUT/tables.md",
        key=False,
        pin=Pin.NEVER,  # each protocol's result is one of its own
    )
    sets: list[str] | None = option(
        None, "only these prompt sets", flag=False, key=False, pin=Pin.CHANGED, digest=set_digest
    )

    def __post_init__(self) -> None:
        if self.protocols:  # "scd,paper" as well as "scd paper"
            self.protocols = [p.strip() for x in self.protocols for p in x.split(",") if p]

    def problems(self) -> Iterator[tuple[str, str]]:
        yield from super().problems()
        from scd.models.protocols import PROTOCOLS

        if self.protocols is None:
            return
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if unknown:
            yield "protocols", f"unknown protocol {unknown[0]!r} (one of {', '.join(PROTOCOLS)})"
        elif len(set(self.protocols)) < 2 or len(set(self.protocols)) < len(self.protocols):
            yield "protocols", "two or more different protocols, comma-separated"
        elif self.protocol != "scd":
            yield "protocols", "give --protocols or --protocol, not both"

    def run_problems(self) -> Iterator[tuple[str, str]]:
        """Training uses the protocol's text (so that it trains what the evaluation scores):
        only a protocol through the model's chat template will do."""
        from scd.models.protocols import PROTOCOLS

        known = PROTOCOLS.get(self.protocol)  # an unknown one: problems() says so
        if known is not None and known.wrap != "chat":
            yield (
                "protocol",
                f"{self.protocol!r}: training goes through the model's chat template, so a "
                "recipe can use protocol scd or paper-chat (the paper's system prompt and "
                "wording); score the paper's hand-written Llama 2 text with scd eval bias "
                "--protocol",
            )

    def effective(self) -> BiasOptions:
        """The rule resolved (the protocol's by default); ``max_new_tokens`` None in choice mode,
        where no text is generated."""
        from scd.models.protocols import get_protocol

        rule = self.rule or get_protocol(self.protocol).rule
        tokens = self.max_new_tokens if self.mode == "generate" else None
        return dataclasses.replace(self, rule=rule, max_new_tokens=tokens)


class Bias(Benchmark):
    name = "bias"
    help = "bias % on contact prompts (records, summary, tables)"
    Options = BiasOptions
    clustered = True
    headline_table = "table10"  # before and after tuning, on each setting's held-out prompts
    arena_columns = BIAS_COLUMNS
    arena_reading = (
        "An arm that removed a bias tied to the groups named lowers bias while its "
        "descriptor-free baseline stays where it was, so the descriptor effect falls; an arm "
        "that learned an answer rule (answering by the action, whoever is named) takes bias and "
        "baseline down together and moves the answer tendency."
    )

    def prompts_note(self, summary: dict[str, Any], options: dict[str, Any]) -> str | None:
        limit, seed = options["limit"], options["seed"]
        subset = f"a stratified subset: limit {limit:,}, seed {seed}" if limit else "all"
        return (
            f"the base model answered {summary['overall']['n']:,} of them ({subset}) and "
            f"{summary['n_baseline_records']:,} descriptor-free baselines"
        )

    def evaluate(self, model: str, out: Path | str, **kwargs: Any) -> dict[str, Any]:
        """As :meth:`Benchmark.evaluate`; with ``protocols``, the same prompts under each
        protocol into ``OUT/<protocol>/`` on one loaded model, then ``OUT/tables.md``: each
        protocol paired with the first (:func:`~scd.eval.benchmarks.bias.runs.runs_table`).
        Returns the first protocol's summary with ``protocols`` (each one's summary) added."""
        protocols = kwargs.pop("protocols", None)
        if not protocols:
            return super().evaluate(model, out, **kwargs)
        from scd.errors import InputError
        from scd.eval.benchmarks.bias.runs import runs_table
        from scd.eval.engines import SharedEngine, engine_spec
        from scd.io import atomic_file
        from scd.models import resolve_model

        fields = {f.name for f in dataclasses.fields(self.Options)}
        options = {k: v for k, v in kwargs.items() if k in fields}
        protocols = self.Options(**options, protocols=protocols).check().protocols  # one line
        if (Path(out) / "run.json").is_file():
            raise InputError(
                "holds one evaluation; --protocols writes one per protocol into a "
                "directory of its own",
                key="out",
                value=str(out),
            )
        spec = (kwargs.pop("engine", None) or engine_spec()).check()
        given = kwargs.pop("shared", None)
        adapters = [kwargs["adapter"]] if kwargs.get("adapter") else []
        shared = given or SharedEngine(spec, resolve_model(model), adapters=adapters)
        runs = {p: Path(out) / p for p in protocols}
        summaries = {}
        try:
            for p, d in runs.items():
                kwargs.update(engine=spec, shared=shared, protocol=p)
                summaries[p] = super().evaluate(model, d, **kwargs)
        finally:
            if given is None:
                shared.close()
        with atomic_file(Path(out) / "tables.md") as tmp:
            tmp.write_text(runs_table(runs).markdown + "\n")
        first = next(iter(summaries.values()))
        return {**first, "protocols": summaries}

    def task(self, model: CausalModel, options: BiasOptions) -> Any:
        from scd.eval.benchmarks.bias.task import bias_task

        return bias_task(
            model, options, lambda: self.identity(options, model.model, model.adapter, model.spec)
        )

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {"bias_pct": summary["overall"]["pct"], "n": summary["overall"]["n"]}

    def describe(self, summary: dict[str, Any]) -> str:
        if "protocols" in summary:
            return "; ".join(f"{p}: {self.describe(s)}" for p, s in summary["protocols"].items())
        o, run = summary["overall"], summary.get("run", {})
        how = f", protocol {run['protocol']}, rule {run['rule']}" if "protocol" in run else ""
        return (
            f"bias {o['pct']:.2f}% [{o['ci_low']:.2f}, {o['ci_high']:.2f}] over {o['n']:,} "
            f"descriptor prompts (+{summary['n_baseline_records']:,} descriptor-free "
            f"baselines, reported apart{how})"
        )

    def table(self, runs: dict[str, Path | str]) -> Table:
        from scd.eval.benchmarks.bias.runs import runs_table

        return runs_table(runs)

    def inputs(self, options: BiasOptions) -> dict[str, Path]:
        return {"prompts": Path(options.prompts) / "prompts.parquet"}

    def jobs(self, run: RunData, options: BiasOptions, setting: tuple[int, Path] | None) -> list:
        replace = dataclasses.replace
        if setting is None:  # the base model: every prompt set, its subset of each
            sets = (("bias", run.prompts), ("bias_eval_prompts", run.eval_prompts))
            return [
                BenchmarkJob(name, self, replace(options, prompts=str(prompts)))
                for name, prompts in sets
                if prompts is not None
            ]
        n, sft = setting
        sets = None
        if options.limit is not None:  # the held-out part of the base model's subset
            from scd.data_gen.contact import read_prompts
            from scd.eval.benchmarks.bias.task import stratified_sets

            source = run.settings[n].split == "source" and run.eval_prompts is not None
            table = read_prompts(run.eval_prompts if source else run.prompts)
            sets = sorted(stratified_sets(table, options.limit, options.seed))
        heldout = replace(options, prompts=str(sft / "heldout"), limit=None, sets=sets)
        return [BenchmarkJob(self.name, self, heldout)]

    def base_job(self, sft: Path) -> str:
        """A setting that splits by source (setting 2) holds out prompts of the second prompt
        set: the base model's result on those."""
        from scd.io import read_json

        manifest = Path(sft) / "manifest.json"
        source = manifest.is_file() and read_json(manifest).get("split") == "source"
        return "bias_eval_prompts" if source else self.name

    def arena(
        self, result: Path, base: Path, items: Path, unit: str = "template"
    ) -> dict[str, Any]:
        """Bias %, its test against the base model, the descriptor-free baseline, the
        descriptor effect and the answer tendency, clustered by ``unit``
        (:func:`~scd.eval.benchmarks.bias.arena.bias_arena`)."""
        from scd.eval.benchmarks.bias.arena import bias_arena

        return bias_arena(result, base, items, unit)

    def flips(self, result: Path, base: Path, items: Path) -> Any:
        """The descriptor prompts answered differently before and after
        (:func:`~scd.eval.benchmarks.bias.arena.bias_flips`)."""
        from scd.eval.benchmarks.bias.arena import bias_flips

        return bias_flips(result, base, items)

    def report(self, layout: Any, tables: Path, figures: dict[str, bytes]) -> list[str]:
        from scd.eval.benchmarks.bias.sections import bias_sections

        return bias_sections(layout, tables, figures)
