"""The arena: every arm of a run (``arms:``) on the same items, one row each --
``tables/arena.{md,csv,json}``, the report's "Arena" section and its Pareto figure.

A row holds each benchmark's own columns (:meth:`scd.eval.benchmarks.base.Benchmark.arena`) and
the arm's capability cost (KL divergence from the base model on neutral prompts;
lm-evaluation-harness scores when the recipe lists tasks). The tables show what each benchmark
declares (:attr:`~scd.eval.benchmarks.base.Benchmark.arena_columns`: label, digits, interval,
p-value, definition) and define every column under the table; this module names no benchmark.
Each p-value column gets a Holm-corrected ``<key>_holm`` over the arms of its setting (the base
row, compared with itself, is left out of the correction), and so does the same test over the
other cluster unit (``<key>_other``), so that the table can say where the two units disagree.
The run's cluster unit (``arena.cluster_unit``) goes to every clustered benchmark. A trained or
prompted arm counts as **debiased** only when its gain column (bias) fell significantly (Holm p
< 0.05) and it passed every gate column (the judgment gate): the report's verdicts and its
figure say which arms did, and why the others did not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.config.vocabulary import RunLayout
from scd.eval.benchmarks import REGISTRY
from scd.eval.benchmarks.clusters import UNITS
from scd.eval.benchmarks.columns import Column, over_seeds
from scd.eval.benchmarks.tables import Table, markdown_table, save_table
from scd.io import read_json
from scd.train.arms import arm_class, arm_names

__all__ = ["ALPHA", "CAPABILITY_COLUMNS", "arena_rows", "arena_section", "arena_table", "verdicts"]

ALPHA = 0.05  # a fall in the gain column counts where its Holm-corrected p is below this

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


def _what(arm: str) -> str:
    """What an arm is, in a line (empty for an arm this process has not registered)."""
    return arm_class(arm).help if arm in arm_names() else ""


def _capability(path: str | None) -> dict[str, Any]:
    if not path or not (Path(path) / "summary.json").is_file():
        return {}
    s = read_json(Path(path) / "summary.json")
    kl = s.get("kl", {})
    cols = {k: kl.get(k) for k in ("kl_mean", "kl_ci_low", "kl_ci_high", "logp_delta")}
    cols["kl_n_prompts"] = kl.get("n_prompts")
    cols.update({f"lm_eval/{k}": v for k, v in (s.get("lm_eval") or {}).items()})
    return cols


def _holm(rows: list[dict[str, Any]], keys: list[str]) -> None:
    """``<key>_holm`` beside each p-value column ``keys``, over the non-base rows of each
    setting."""
    from statsmodels.stats.multitest import multipletests

    for setting in {r["setting"] for r in rows}:
        group = [r for r in rows if r["setting"] == setting]
        for key in keys:
            tested = [r for r in group if r["arm"] != "base" and r.get(key) is not None]
            if tested:
                corrected = multipletests([r[key] for r in tested], method="holm")[1]
                for r, p in zip(tested, corrected):
                    r[f"{key}_holm"] = float(p)
            for r in group:
                r.setdefault(f"{key}_holm", None)


def arena_rows(layout: RunLayout, unit: str = "template") -> list[dict[str, Any]]:
    """One row per setting and arm (the base model's row repeated for each setting, on that
    setting's items), from a run's ``layout.json``; clustered benchmarks cluster by ``unit``."""
    arms = layout["arms"]
    base = next(a for a in arms if a["arm"] == "base")
    rows = []
    for setting in dict.fromkeys(a["setting"] for a in arms if a["setting"] is not None):
        group = [a for a in arms if a["setting"] == setting]
        for arm in [base, *group]:
            row: dict[str, Any] = {
                "setting": setting,
                "arm": arm["arm"],
                **({"seed": arm["seed"]} if "seed" in arm else {}),  # the arena's seeds
                "what": _what(arm["arm"]),
            }
            for name, bench in REGISTRY.items():
                items = next((a["evals"][name] for a in group if name in a["evals"]), None)
                before = bench.base_job(Path(group[0]["sft"]))  # the base model's "before"
                if items is None or before not in base["evals"]:
                    continue
                against = Path(base["evals"][before])
                result = against if arm is base else Path(arm["evals"].get(name, ""))
                if arm is base or name in arm["evals"]:
                    how = {"unit": unit} if bench.clustered else {}
                    row.update(bench.arena(result, against, Path(items), **how))
            row.update(_capability(arm.get("capability")))
            rows.append(row)
    p_keys = sorted(c.key for b in REGISTRY.values() for c in b.arena_columns if c.p)
    _holm(rows, [*p_keys, *(f"{k}_other" for k in p_keys if any(f"{k}_other" in r for r in rows))])
    return rows


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


SEEDS = Column(
    "seeds",
    "Seeds",
    "how many seeds a trained arm's row stands for: the mean over them, their range in "
    "parentheses, for a p-value the largest; each seed's row, with its intervals, is in "
    "arena.csv",
    digits=0,
    table="bias",
)


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
                f"{_name(r)}: {r[f'{c.key}_holm']:.2g} by {unit}, {r[f'{c.key}_other_holm']:.2g} "
                f"by {other}"
                for r in split
            )
            lines.append(
                f"- **{c.label}** changes its verdict (Holm p < {ALPHA}) with the cluster unit "
                f"for {named}: one template's wording is shared by all its cells, so the "
                f"template is the default unit; the cells are the finer one."
            )
    return [*lines, ""] if lines else []


def _name(row: dict[str, Any]) -> str:
    seed = f" ({row['seed']})" if "seed" in row else ""
    return f"{row['arm']}{seed}" + (f", setting {row['setting']}" if row.get("setting") else "")


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
        + "; ".join(f"{a}: {_what(a) or 'not registered in this process'}" for a in arms)
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


def _verdict(row: dict[str, Any], base: dict[str, Any], gain: Column, gates: list[Column]) -> str:
    """One arm's verdict, in a line (see the module docstring)."""
    p = row.get(f"{gain.test}_holm") if gain.test else None
    if row.get(gain.key) is None or base.get(gain.key) is None or p is None:
        return "no verdict yet (its held-out result has not finished)"
    lost = [c for c in gates if row.get(c.key) == 0]
    unknown = [c for c in gates if row.get(c.key) is None]
    fell = row[gain.key] < base[gain.key] and p < ALPHA
    change = f"{base[gain.key]:.1f} → {row[gain.key]:.1f}, Holm p {p:.2g}"
    if not fell:
        return f"**not debiased**: its bias did not fall significantly ({change})"
    if lost:
        why = "; ".join(row.get(f"{c.key}_why") or c.label for c in lost)
        return f"**not debiased**: its bias fell ({change}) but it lost its judgment -- {why}"
    if unknown:
        why = "; ".join(
            row.get(f"{c.key}_why") or f"no {c.label.lower()} (its benchmark did not run)"
            for c in unknown
        )
        return f"bias fell ({change}); not established as debiased: {why}"
    return f"**debiased**: its bias fell ({change}) and it kept its judgment"


def verdicts(rows: list[dict[str, Any]], declared: list[Column]) -> list[str]:
    """The arms' verdicts under the first table, one line per arm and seed; each row gets
    ``debiased`` (True, False, or None: not established)."""
    gain = next((c for c in declared if c.gain and c.test), None)
    gates = [c for c in declared if c.gate]
    if gain is None:
        return []
    lines = []
    for row in (r for r in rows if r["arm"] != "base"):
        base = next(b for b in rows if b["setting"] == row["setting"] and b["arm"] == "base")
        text = _verdict(row, base, gain, gates)
        row["debiased"] = (
            True if text.startswith("**debiased") else False if "not debiased" in text else None
        )
        lines.append(f"- {_name(row)}: {text}.")
    if not lines:
        return []
    rule = " and kept its judgment (every gate column)" if gates else ""
    return [
        f"Verdicts: an arm is debiased when its held-out {gain.label.split(' [')[0].lower()} "
        f"fell significantly (Holm p < {ALPHA}){rule}.",
        "",
        *lines,
        "",
    ]


def _gain() -> Column | None:
    """The column the arena's figure plots (a benchmark's, :attr:`Column.gain`)."""
    return next((c for b in REGISTRY.values() for c in b.arena_columns if c.gain and c.ci), None)


def _pareto(rows: list[dict[str, Any]], gain: Column) -> Any:
    import pandas as pd

    points = []
    for r in rows:
        base = next(b for b in rows if b["setting"] == r["setting"] and b["arm"] == "base")
        key, (low, high) = gain.key, gain.ci
        if r.get("kl_mean") is None or r.get(key) is None or base.get(key) is None:
            continue
        label = (
            r["arm"] if len({x["setting"] for x in rows}) == 1 else f"{r['arm']} ({r['setting']})"
        )
        lost = any(r.get(c.key) == 0 for b in REGISTRY.values() for c in b.arena_columns if c.gate)
        points.append(
            {
                "label": label,
                "kept": not lost,
                "cost": r["kl_mean"],
                "cost_low": r.get("kl_ci_low"),
                "cost_high": r.get("kl_ci_high"),
                "gain": base[key] - r[key],
                "gain_low": base[key] - r[high],
                "gain_high": base[key] - r[low],
            }
        )
    return pd.DataFrame(points)


def arena_section(
    layout: RunLayout, tables: Path, figures: dict[str, bytes], unit: str = "template"
) -> list[str]:
    """The report's "Arena" section (and ``tables/arena.*``, ``figures/arena.png``), clustered
    by ``unit`` (the recipe's ``arena.cluster_unit``)."""
    from scd.eval.benchmarks.captions import FIGURE
    from scd.report.pareto import pareto_png

    table = arena_table(layout, unit)
    save_table(tables, table)
    lines = ["## Arena", "", table.markdown.rstrip(), ""]
    gain = _gain()
    frame = _pareto(table.rows, gain) if gain is not None else []
    if len(frame):
        what = gain.label.split(" [")[0]
        figures["arena"] = pareto_png(frame, title=f"Fall in {what} against capability cost")
        lines += [
            "{{figure:arena}}",
            "",
            f"*{FIGURE}. Each arm's fall in {what} from the base model (base minus arm; bars: "
            "the arm's 95% interval, the base taken as fixed) against its KL divergence from "
            "the base model on neutral prompts (bars: bootstrap interval); the dashed line joins "
            "the arms that no other beats on both; a hollow point is an arm that lost its "
            "judgment (the judgment gate), not debiased whatever its fall, and off that line.*",
            "",
        ]
    readings = [b.arena_reading for b in REGISTRY.values() if b.arena_reading]
    lines += [
        "How to read it: "
        + " ".join(readings)
        + (" " if readings else "")
        + "A KL near 0 means the arm answers neutral prompts as the base model does; it cannot "
        "show a loss of skills the neutral prompts do not exercise (list lm-eval tasks for "
        "those).",
        "",
    ]
    return lines
