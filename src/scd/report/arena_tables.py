"""The arena's tables: every arm of a run on the same items, one row each, as Markdown (two
tables: held-out bias; cost and what each arm did elsewhere) and tidy rows --
``tables/arena.{md,csv,json}``.

The tables show what each benchmark declares
(:attr:`~scd.eval.benchmarks.base.Benchmark.arena_columns`: label, digits, interval, p-value,
definition) and define every column under the table; where a p-value's verdict differs between
the two cluster units, the table says so. This module names no benchmark.
"""

from __future__ import annotations

from typing import Any

from scd.config.vocabulary import RunLayout
from scd.eval.benchmarks import REGISTRY
from scd.eval.benchmarks.clusters import UNITS
from scd.eval.benchmarks.columns import Column, over_seeds
from scd.eval.benchmarks.tables import Table, markdown_table
from scd.report.arena_rows import arena_rows, what_arm_is
from scd.report.arena_verdicts import ALPHA, row_name, verdicts

__all__ = ["CAPABILITY_COLUMNS", "SEEDS", "arena_table"]

CAPABILITY_COLUMNS = (
    Column(
        "kl_mean",
        "KL from base [95% CI]",
        "the mean D_KL(arm ‖ base) per token of the reference replies to neutral prompts "
        "(nats/token; 0: the base model's own next-token distribution), with a percentile "
        "bootstrap interval over prompts",
        digits=4,
        ci=("kl_ci_low", "kl_ci_high"),
    ),
    Column(
        "logp_delta",
        "Δ log-lik/token",
        "the mean log-likelihood per token of those reference replies under the arm minus under "
        "the base model (nats; below 0: the arm finds the replies less likely)",
        digits=3,
    ),
)


SEEDS = Column(
    "seeds",
    "Seeds",
    "how many seeds a trained arm's row stands for: the mean over them, their range in "
    "parentheses, for a p-value the largest; each seed's row, with its intervals, is in "
    "arena.csv",
    digits=0,
    table="bias",
)


def _present(layout: RunLayout) -> tuple[list[Any], list[str]]:
    """The benchmarks with arena columns that this run evaluated, and a note on those it did
    not (their columns are left out; those it has not finished yet are named by
    :func:`arena_table`)."""
    evaluated = {name for a in layout["arms"] for name in a["evals"]}
    found, missing = [], []
    for name, bench in REGISTRY.items():
        if not bench.arena_columns:
            continue
        if name in evaluated:
            found.append(bench)
        elif name not in layout.get("unfinished", ()):
            missing.append(f"{name} (eval.{name}.enabled is not set in this recipe)")
    return found, missing


def _table(rows: list[dict[str, Any]], columns: list[Column]) -> list[str]:
    head = ["Setting", "Arm", *(c.label for c in columns)]
    body = [[r["setting"], r["arm"], *(c.cell(r) for c in columns)] for r in over_seeds(rows)]
    return markdown_table(head, body)


def _defined(columns: list[Column], unit: str) -> list[str]:
    defined = (c.defined.replace("{clusters}", UNITS[unit]) for c in columns)
    return [f"- **{c.label}**: {d}." for c, d in zip(columns, defined)] + [""]


def _units_disagree(rows: list[dict[str, Any]], columns: list[Column], unit: str) -> list[str]:
    """A line per p-value column whose verdict at alpha 0.05 (Holm) differs between the run's
    cluster unit and the other one, naming the arms and both p-values."""
    other = next(u for u in UNITS if u != unit)
    lines = []
    for c in (c for c in columns if c.p):
        split = [
            r
            for r in rows
            if r["arm"] != "base"
            and r.get(f"{c.key}_holm") is not None
            and r.get(f"{c.key}_other_holm") is not None
            and (r[f"{c.key}_holm"] < ALPHA) != (r[f"{c.key}_other_holm"] < ALPHA)
        ]
        if split:
            named = "; ".join(
                f"{row_name(r)}: {r[f'{c.key}_holm']:.2g} by {unit}, "
                f"{r[f'{c.key}_other_holm']:.2g} by {other}"
                for r in split
            )
            lines.append(
                f"- **{c.label}** changes its verdict (Holm p < {ALPHA}) with the cluster unit "
                f"for {named}: one template's wording is shared by all its cells, so the "
                f"template is the default unit; the cells are the finer one."
            )
    return [*lines, ""] if lines else []


def arena_table(layout: RunLayout, unit: str = "template") -> Table:
    """The arena as Markdown (two tables: held-out bias; cost and what each arm did elsewhere,
    every column defined under its table; the arms' verdicts) and tidy rows (unrounded
    values), clustered by ``unit``."""
    rows = arena_rows(layout, unit)
    benches, missing = _present(layout)
    declared = [c for b in benches for c in b.arena_columns]
    bias = [c for c in declared if c.table == "bias"]
    if any("seed" in r for r in rows):
        bias = [*bias, SEEDS]
    lm = sorted({k for r in rows for k in r if k.startswith("lm_eval/") and "stderr" not in k})
    lm_columns = [
        Column(k, k.removeprefix("lm_eval/"), "lm-evaluation-harness's score of the task", 3)
        for k in lm
    ]
    transfer = [*CAPABILITY_COLUMNS, *(c for c in declared if c.table == "transfer"), *lm_columns]
    arms = dict.fromkeys(r["arm"] for r in rows)
    lines = [
        "Arena: every arm on the same held-out items of its setting (the base model's row is "
        "repeated for each setting, on that setting's items). Arms: "
        + "; ".join(f"{a}: {what_arm_is(a) or 'not registered in this process'}" for a in arms)
        + ".",
        "",
    ]
    if bias:
        lines += [*_table(rows, bias), *_defined(bias, unit), *_units_disagree(rows, bias, unit)]
        lines += verdicts(rows, declared)
    lines += [
        "What each arm cost, and what it did elsewhere.",
        "",
        *_table(rows, transfer),
        *_defined(transfer, unit),
        *_units_disagree(rows, transfer, unit),
        "– : no value (the base model is not tested against itself; an arm without that result).",
    ]
    if missing:
        lines += ["", "Not in these tables: " + "; ".join(missing) + "."]
    if layout.get("unfinished"):
        lines += [
            "",
            "Not finished yet (the run has not ended): results of "
            + ", ".join(layout["unfinished"])
            + "; their cells are – or left out until they are in.",
        ]
    return Table("\n".join(lines), rows, "arena")
