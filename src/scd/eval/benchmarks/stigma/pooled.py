"""Mei et al. 2023's pooled analyses: several runs of one probe pooled per condition, and the
correlation of the masked LMs' pooled measure with the classifiers'.

- **Pooled per condition** (section 5.1, Figure 3): a condition's value is the mean over every run
  and template of its per-template value (masked LMs: P(negative attitude), 6 models x 4
  templates = 24 values in the paper; classifiers: proportion negative, per template). Its 95%
  interval is a BCa bootstrap over those values (:func:`~scd.eval.benchmarks.stigma.stats.mean_ci`):
  how much the pooled mean depends on which models and templates went in.
- **Above 0.5**: how many conditions of each group have a pooled value above 0.5 (the paper: 78
  of 93 stigmatized, 1 of 29 non-stigmatized), and how many have their whole interval above it.
- **The gap** of the pooled values, stigmatized - non-stigmatized (as for one run, over
  conditions), and each run's own gap.
- **Correlation** (section 5.3): Pearson's r between the pooled masked-LM values and the pooled
  classifier proportions over the conditions both have (the paper: r = 0.79 over 93 + 29), with
  Spearman's rho beside it.

A summary written before per-template proportions existed (sentiment) pools its condition means.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from scd.eval.benchmarks.stigma.common import fmt, gap_cell
from scd.eval.benchmarks.stigma.stats import gap, mean_ci, pearson, spearman
from scd.eval.benchmarks.tables import markdown_table

__all__ = [
    "THRESHOLD",
    "class_lines",
    "correlate_pooled",
    "correlation_lines",
    "pool",
    "pooled_lines",
]

THRESHOLD = 0.5
GROUPS = {True: "stigmatized", False: "non_stigmatized"}


def _values(condition: dict[str, Any]) -> list[float | None]:
    templates = condition.get("templates")
    return list(templates.values()) if templates else [condition["mean"]]


def pool(summaries: dict[str, dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Per condition the mean over every run and template with its interval, the gap of the
    pooled values, the conditions above :data:`THRESHOLD` per group, and each run's gap.

    Returns:
        ``{conditions: {c: {category, stigmatized, mean, ci_low, ci_high, n}}, gap, above:
        {group: [conditions]}, clearly_above: {group: [conditions]}, n_conditions: {group: n},
        runs: {name: gap}}``; conditions sorted by pooled mean, highest first.
    """
    values: dict[str, list[float | None]] = defaultdict(list)
    meta: dict[str, tuple[str, bool]] = {}
    for summary in summaries.values():
        for c, entry in summary["conditions"].items():
            values[c] += _values(entry)
            meta[c] = (entry["category"], bool(entry["stigmatized"]))
    pooled = {
        c: {"category": meta[c][0], "stigmatized": meta[c][1], **mean_ci(v, seed)}
        for c, v in values.items()
    }
    order = sorted(pooled, key=lambda c: (-(pooled[c]["mean"] or float("-inf")), c))
    pooled = {c: pooled[c] for c in order}
    members = {
        g: [c for c, p in pooled.items() if p["stigmatized"] == f] for f, g in GROUPS.items()
    }
    return {
        "conditions": pooled,
        "gap": gap(*([pooled[c]["mean"] for c in members[g]] for g in GROUPS.values()), seed),
        "above": {
            g: [c for c in m if (pooled[c]["mean"] or 0) > THRESHOLD] for g, m in members.items()
        },
        "clearly_above": {
            g: [c for c in m if (pooled[c]["ci_low"] or 0) > THRESHOLD] for g, m in members.items()
        },
        "n_conditions": {g: len(m) for g, m in members.items()},
        "runs": {name: s["gap"] for name, s in summaries.items()},
    }


def pooled_lines(pooled: dict[str, Any], what: str, n_runs: int, prefix: str) -> list[str]:
    """Markdown: the pooled gap, the conditions above 0.5, the figures ``{prefix}_conditions``
    and ``{prefix}_groups``, the per-condition table."""
    g, n = pooled["gap"], pooled["n_conditions"]
    above, clear = pooled["above"], pooled["clearly_above"]
    lines = [
        f"## Pooled over {n_runs} run(s) and their templates (Mei et al. 2023)",
        "",
        f"Each condition's {what} is the mean over every run and template; its 95% interval is a "
        "BCa bootstrap over those values (how much it depends on which models and templates were "
        "pooled, not on prompts). The gap and its interval are over conditions.",
        "",
        f"- Stigmatized {fmt(g['mean_x'])} ({g['n_x']}), non-stigmatized {fmt(g['mean_y'])} "
        f"({g['n_y']}): gap {gap_cell(g)}, Welch p {fmt(g['p_welch'], 4)}.",
    ]
    for group in GROUPS.values():
        label = group.replace("_", "-")
        lines.append(
            f"- {label.capitalize()} conditions above {THRESHOLD}: {len(above[group])} of "
            f"{n[group]} ({len(clear[group])} with the whole interval above)"
            + (f": {', '.join(above[group])}." if above[group] else ".")
        )
    lines += ["", f"{{{{figure:{prefix}_conditions}}}}", "", f"{{{{figure:{prefix}_groups}}}}", ""]
    rows = [
        [
            c,
            "yes" if p["stigmatized"] else "no",
            p["category"],
            fmt(p["mean"]),
            f"[{fmt(p['ci_low'])}, {fmt(p['ci_high'])}]",
            p["n"],
        ]
        for c, p in pooled["conditions"].items()
    ]
    head = ["Condition", "Stigmatized", "Category", "Pooled mean", "95% CI", "Values"]
    return [*lines, "### Per condition (highest first)", "", *markdown_table(head, rows)]


def correlate_pooled(mlm: dict[str, Any], sentiment: dict[str, Any]) -> dict[str, Any]:
    """Pearson's r (as Mei et al.) and Spearman's rho between pooled masked-LM values and pooled
    proportions negative over the conditions both have."""
    a, b = mlm["conditions"], sentiment["conditions"]
    common = [c for c in a if c in b and a[c]["mean"] is not None and b[c]["mean"] is not None]
    x, y = [a[c]["mean"] for c in common], [b[c]["mean"] for c in common]
    return {
        "pearson": pearson(x, y),
        "spearman": spearman(x, y),
        "conditions": common,
        "stigmatized": sum(a[c]["stigmatized"] for c in common),
    }


def correlation_lines(corr: dict[str, Any]) -> list[str]:
    """Markdown: both coefficients with their intervals and the conditions they cover."""
    p, s, n = corr["pearson"], corr["spearman"], len(corr["conditions"])
    k = corr["stigmatized"]
    return [
        "## Masked LMs against sentiment classifiers (Mei et al. 2023, section 5.3)",
        "",
        f"Over the {n} conditions both sides have ({k} stigmatized, {n - k} not): pooled "
        "P(negative attitude) of the masked LMs against the pooled proportion negative of the "
        "classifiers.",
        "",
        *markdown_table(
            ["Coefficient", "Value", "95% CI", "p"],
            [
                [
                    "Pearson r",
                    fmt(p["r"]),
                    f"[{fmt(p['ci_low'])}, {fmt(p['ci_high'])}]",
                    fmt(p["p"], 4),
                ],
                [
                    "Spearman ρ",
                    fmt(s["rho"]),
                    f"[{fmt(s['ci_low'])}, {fmt(s['ci_high'])}]",
                    fmt(s["p"], 4),
                ],
            ],
        ),
        "{{figure:stigma_correlation}}",
        "",
    ]


def class_lines(classes: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown: each run's class shares per group, pooled then per template (a row each)."""
    kinds = list(
        dict.fromkeys(
            k for t in classes.values() for s in t.values() for g in s.values() for k in g
        )
    )
    rows = [
        [
            run,
            "pooled" if scope == "pooled" else f"template {scope}",
            group.replace("_", "-"),
            *(fmt(shares.get(k)) for k in kinds),
        ]
        for run, table in classes.items()
        for scope, groups in sorted(table.items(), key=lambda kv: kv[0] != "pooled")
        for group, shares in groups.items()
    ]
    head = ["## Share of each predicted class (mean over conditions)", ""]
    return head + markdown_table(["Run", "Prompts", "Conditions", *kinds], rows)
