"""Runs of the masked-LM and sentiment probes in one table, as Mei et al. 2023 read them: side by
side, pooled per condition over runs and templates (with figures and the paper's numbers
beside), and -- masked LMs with classifiers -- correlated (``scd report mlm|sentiment|stigma
--runs ...``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.benchmarks.stigma.common import gap_lines
from scd.eval.benchmarks.tables import Table, read_summaries, read_summary

__all__ = ["POOLED_PROBES", "pooled_stigma_table", "probe_table", "runs_by_probe"]

POOLED_PROBES = {"mlm": "P(negative attitude)", "sentiment": "proportion negative"}


def runs_by_probe(runs: dict[str, Path | str]) -> dict[str, dict[str, Path | str]]:
    """``--runs`` grouped by the probe each summary names, in the order given."""
    probes: dict[str, dict[str, Path | str]] = {}
    for n, d in runs.items():
        summary = read_summary(d, "stigma probe", value=f"{n}={d}")
        if "probe" not in summary:
            raise InputError("not a stigma probe's run", key="runs", value=f"{n}={d}")
        probes.setdefault(summary["probe"], {})[n] = d
    return probes


def _side_by_side(name: str, what: str, summaries: dict[str, Any]) -> tuple[list, list]:
    lines, rows = gap_lines(summaries)
    note = (
        f"Cells: mean {what} per condition group (conditions); gap = stigmatized − "
        "non-stigmatized, 95% BCa bootstrap CI over conditions (aggregated as in Mei et al. 2023)."
    )
    return [f"## Stigma: {what} ({name} probe)", "", *lines, note, ""], rows


def _pooled(name: str, what: str, summaries: dict[str, Any]) -> tuple[list, list, dict, dict]:
    """The pooled section of one probe's runs: Markdown, rows, figures and the pooled values;
    classifier runs also get their class shares."""
    import pandas as pd

    from scd.eval.benchmarks.stigma.papers import mei_lines
    from scd.eval.benchmarks.stigma.pooled import class_lines, pool, pooled_lines
    from scd.eval.benchmarks.stigma.pooled_figures import classes_png, conditions_png, groups_png

    pooled = pool(summaries)
    lines = pooled_lines(pooled, what, len(summaries), prefix=name)
    frame = pd.DataFrame([{"condition": c, **p} for c, p in pooled["conditions"].items()])
    per_run = pd.DataFrame(
        [
            {"run": n, "stigmatized": c["stigmatized"], "mean": c["mean"]}
            for n, s in summaries.items()
            for c in s["conditions"].values()
        ]
    )
    figures = {
        f"{name}_conditions": conditions_png(frame, f"pooled {what}"),
        f"{name}_groups": groups_png(per_run, what),
    }
    rows = [
        {"run": "pooled", "scope": f"condition: {c}", **p} for c, p in pooled["conditions"].items()
    ]
    rows.append({"run": "pooled", "scope": "gap", **pooled["gap"]})
    classes = {n: s["classes"] for n, s in summaries.items() if "classes" in s}
    if classes:  # classifiers: every class's share (Mei et al.'s Figure 4)
        shares = pd.DataFrame(
            [
                {"run": n, "stigmatized": g == "stigmatized", **v}
                for n, t in classes.items()
                for g, v in t["pooled"].items()
            ]
        )
        figures[f"{name}_classes"] = classes_png(shares)
        lines += [*class_lines(classes), f"{{{{figure:{name}_classes}}}}", ""]
    return [*lines, *mei_lines(name, summaries, pooled)], rows, figures, pooled


def probe_table(name: str, runs: dict[str, Path | str]) -> Table:
    """Runs of the ``mlm`` or ``sentiment`` probe side by side and pooled."""
    what = POOLED_PROBES[name]
    summaries = read_summaries(runs, name, probe=True)
    md, rows = _side_by_side(name, what, summaries)
    more, pooled_rows, figures, _ = _pooled(name, what, summaries)
    return Table("\n".join(md + more), rows + pooled_rows, f"stigma-{name}", figures)


def pooled_stigma_table(probes: dict[str, dict[str, Path | str]]) -> Table:
    """Masked-LM runs with classifier runs (:func:`runs_by_probe`): each pooled, then correlated
    (Mei et al. 2023, section 5.3).

    Raises:
        InputError: the runs are not of exactly these two probes.
    """
    import pandas as pd

    from scd.eval.benchmarks.stigma.papers import mei_correlation_line
    from scd.eval.benchmarks.stigma.pooled import correlate_pooled, correlation_lines
    from scd.eval.benchmarks.stigma.pooled_figures import correlation_png

    if set(probes) != set(POOLED_PROBES):
        raise InputError(
            f"runs of the probes {', '.join(sorted(probes))}: scd report stigma takes one probe's "
            "runs, or mlm runs with sentiment runs (pooled and correlated)",
            key="runs",
        )
    md, rows, figures, pooled = [], [], {}, {}
    for name, what in POOLED_PROBES.items():
        summaries = read_summaries(probes[name], name, probe=True)
        side, side_rows = _side_by_side(name, what, summaries)
        more, more_rows, more_figures, pooled[name] = _pooled(name, what, summaries)
        md, rows = md + side + more, rows + side_rows + more_rows
        figures.update(more_figures)
    corr = correlate_pooled(pooled["mlm"], pooled["sentiment"])
    a, b = pooled["mlm"]["conditions"], pooled["sentiment"]["conditions"]
    frame = pd.DataFrame(
        [
            {
                "condition": c,
                "stigmatized": a[c]["stigmatized"],
                "x": a[c]["mean"],
                "y": b[c]["mean"],
            }
            for c in corr["conditions"]
        ]
    )
    figures["stigma_correlation"] = correlation_png(
        frame, "masked LMs: pooled P(negative attitude)", "classifiers: pooled proportion negative"
    )
    md += [*correlation_lines(corr), mei_correlation_line(corr), ""]
    rows += [
        {"run": "pooled", "scope": f"correlation: {k}", **corr[k]} for k in ("pearson", "spearman")
    ]
    return Table("\n".join(md), rows, "stigma-pooled", figures)
