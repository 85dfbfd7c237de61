"""``scd eval bias``: bias % on the contact prompts (the SCD paper's benchmark).

In ``scd run`` the base model answers every prompt of the prompt set (Tables 1, 3-5; the second
prompt set of a source split too) and each tuned model its setting's held-out prompts -- the
held-out part of the base model's subset, so "before" and "after" are the same prompts
(Tables 10-14, :mod:`~scd.eval.benchmarks.bias.report`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scd.config.options import option, positive
from scd.eval.benchmarks.base import Benchmark, BenchmarkOptions, Job, RunData, Table
from scd.eval.tasks import CausalModel

__all__ = ["Bias", "BiasOptions"]


@dataclass
class BiasOptions(BenchmarkOptions):
    """Bias % on contact prompts: ``scd eval bias`` flags, a recipe's ``eval.bias`` keys."""

    enabled: bool = option(True, "scd run: the base model on every prompt, each tuned model on "
                           "its held-out part", flag=False)  # fmt: skip
    prompts: str | None = option(
        None, "directory with prompts.parquet (scd run: its own)", required=True, key=False
    )
    limit: int | None = option(
        None, "a stratified, seeded subset of ~N descriptor prompts (whole sets; the baselines "
        "of their templates come on top)", check=positive,
    )  # fmt: skip
    seed: int = option(0, "seed of the --limit subset")
    mode: Literal["choice", "generate"] = option(
        "choice", "choice: the most probable option; generate: greedy text parsed to an option"
    )
    max_new_tokens: int = option(8, "generate mode: tokens to generate", check=positive)
    denominator: Literal["all", "parsed"] = option(
        "all", "all: unparsed answers count in the total (the paper); parsed: they don't"
    )
    chunk_size: int = option(512, "prompts per resumable chunk", check=positive)
    protocol: Literal["scd", "paper", "paper-chat", "paper-verbatim"] = option(
        "scd", "how prompts are put and answers chosen: scd (the chat template, summed "
        "log-probs), paper (the SCD paper's code: Llama 2 [INST] text with its default system "
        "prompt, CAPPr's mean log-prob), paper-chat, paper-verbatim (scd.models.protocols)",
    )  # fmt: skip
    rule: Literal["sum", "mean", "bytes"] | None = option(
        None, "choice mode: the option of highest summed, per-token mean or per-byte "
        "log-prob (default: the protocol's)",
    )  # fmt: skip
    sets: list[str] | None = option(None, flag=False, key=False)  # only these prompt sets

    def identity(self) -> dict[str, Any]:
        """What a result depends on besides the prompts: every option but ``enabled``; the
        protocol and rule only where they are not scd's (so earlier results keep their keys)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "enabled"}
        if self.protocol == "scd" and self.rule is None:
            del out["protocol"], out["rule"]
        return out


class Bias(Benchmark):
    name = "bias"
    help = "bias % on contact prompts (records, summary, tables)"
    Options = BiasOptions

    def task(self, model: CausalModel, options: BiasOptions) -> Any:
        from scd.eval.benchmarks.bias.task import bias_task

        return bias_task(model, options)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {"bias_pct": summary["overall"]["pct"], "n": summary["overall"]["n"]}

    def describe(self, summary: dict[str, Any]) -> str:
        o = summary["overall"]
        return (f"bias {o['pct']:.2f}% [{o['ci_low']:.2f}, {o['ci_high']:.2f}] over {o['n']:,} "
                f"descriptor prompts (+{summary['n_baseline_records']:,} descriptor-free "
                "baselines, reported apart)")  # fmt: skip

    def table(self, runs: dict[str, Path | str]) -> Table:
        from scd.eval.benchmarks.bias.sections import runs_table

        return runs_table(runs)

    def jobs(self, run: RunData, options: BiasOptions, setting: tuple[int, Path] | None) -> list:
        from scd.io import sha256_file

        replace = dataclasses.replace
        if setting is None:  # the base model: every prompt set, its subset of each
            jobs = []
            for name, prompts in (("bias", run.prompts), ("bias_eval_prompts", run.eval_prompts)):
                if prompts is not None:
                    opts = replace(options, prompts=str(prompts))
                    key = {**opts.identity(), "enabled": None,
                           "prompts": sha256_file(Path(prompts) / "prompts.parquet")}  # fmt: skip
                    jobs.append(Job(name, self, opts, key))
            return jobs
        n, sft = setting
        sets = None
        if options.limit is not None:  # the held-out part of the base model's subset
            from scd.data_gen.contact import read_prompts
            from scd.eval.benchmarks.bias.task import stratified_sets

            source = run.settings[n].split == "source" and run.eval_prompts is not None
            table = read_prompts(run.eval_prompts if source else run.prompts)
            sets = sorted(stratified_sets(table, options.limit, options.seed))
        heldout = replace(options, prompts=str(sft / "heldout"), limit=None, sets=sets)
        return [Job(self.name, self, heldout, {})]

    def base_job(self, sft: Path) -> str:
        """A setting that splits by source (setting 2) holds out prompts of the second prompt
        set: the base model's result on those."""
        from scd.io import read_json

        manifest = Path(sft) / "manifest.json"
        source = manifest.is_file() and read_json(manifest).get("split") == "source"
        return "bias_eval_prompts" if source else self.name

    def arena(self, result: Path, base: Path, items: Path) -> dict[str, Any]:
        """Bias %, its McNemar test against the base model, the descriptor-free baseline, the
        descriptor effect and the answer tendency
        (:func:`~scd.eval.benchmarks.bias.arena.bias_arena`)."""
        from scd.eval.benchmarks.bias.arena import bias_arena

        return bias_arena(result, base, items)

    def report(self, layout: Any, tables: Path, figures: dict[str, bytes]) -> list[str]:
        from scd.eval.benchmarks.bias.sections import bias_sections

        return bias_sections(layout, tables, figures)
