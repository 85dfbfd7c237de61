"""The AQ-27 probe's Markdown: one run's ``tables.md`` (Table 2 of Mina et al. 2024) and several
runs side by side with Figures 1 and 2 (``scd report aq27``, the run report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.eval.benchmarks.tables import Table, markdown_table, read_summaries

__all__ = ["MEASURES", "aq27_markdown", "aq27_table", "vocabulary_line"]

MEASURES = {
    "causal_prior_corrected": "prior-corrected log-likelihood",
    "pll_word_l2r": "PLL-word-l2r",
}


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}g}" if abs(x) < 1e-3 else f"{x:.{digits}f}"


def _stars(p: float | None) -> str:
    if p is None:
        return "–"
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else "n.s."


def _counts(summary: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """``{type: (kept, of)}`` (empty for a summary written before the filter existed)."""
    kept, dropped = summary.get("illnesses_kept") or {}, summary.get("illnesses_dropped") or {}
    return {t: (len(v), len(v) + len(dropped.get(t, []))) for t, v in kept.items()}


def vocabulary_line(summary: dict[str, Any]) -> str | None:
    """One line: which illnesses the in-vocabulary filter kept and dropped (None: not recorded)."""
    counts = _counts(summary)
    if not counts:
        return None
    of = " and ".join(f"{k} of {n} {t}" for t, (k, n) in counts.items())
    if not summary.get("in_vocabulary"):
        return f"Illnesses: all {of} scored (in_vocabulary false: no vocabulary filter)."
    gone = "; ".join(f"{t}: {', '.join(v)}" for t, v in summary["illnesses_dropped"].items() if v)
    return (
        f"Illnesses in the model's vocabulary (every word one token of its tokenizer, Mina et "
        f"al. 2024, section 3.1): {of} scored; dropped: {gone or 'none'}."
    )


def aq27_markdown(summary: dict[str, Any], title: str) -> str:
    """The AQ-27 summary in the layout of Table 2 of Mina et al. 2024, plus the mean differences."""
    o = summary["overall"]
    vocabulary = vocabulary_line(summary)
    lines = [
        f"# {title}",
        "",
        "Mental vs physical illness: Wilcoxon signed-rank over sentence frames (item x noun "
        "phrase), per-dimension p-values Bonferroni-corrected; alpha = Cronbach's alpha over the "
        f"mental illnesses. Difference = mean score of mental - physical illnesses; score: "
        f"{summary['measure']}. Positive: mental illnesses more likely in the stigma statement. "
        "Avoidance and help items express willingness (reverse-scored in the AQ-27).",
        "",
        *([vocabulary, ""] if vocabulary else []),
        "| Dimension | Mental − physical | Adjusted p | Significance | α | Frames |",
        "|---|---|---|---|---|---|",
        f"| ALL | {_f(o['mean_diff'])} | {_f(o['p'])} | {_stars(o['p'])} | – | {o['n']} |",
    ]
    for dim, r in summary["dimensions"].items():
        lines.append(
            f"| {dim.capitalize()} | {_f(r['mean_diff'])} | {_f(r['p_bonferroni'])} | "
            f"{_stars(r['p_bonferroni'])} | {_f(r['alpha'], 2)} | {r['n']} |"
        )
    lines += ["", "## Mean score per illness", "", "| Type | Illness | Mean |", "|---|---|---|"]
    for key, v in summary["illnesses"].items():
        kind, name = key.split("/", 1)
        lines.append(f"| {kind} | {name} | {_f(v)} |")
    return "\n".join(lines) + "\n"


def _figures(runs: dict[str, Path | str], measure: str) -> tuple[dict[str, bytes], list[str]]:
    """Figures 1 and 2 of Mina et al. 2024 from the runs' records, and their Markdown."""
    from scd.eval.benchmarks.stigma.aq27_figures import boxes_png, diffs_png, records_frame

    frame = records_frame(runs)
    figures = {"aq27_boxes": boxes_png(frame, measure), "aq27_diffs": diffs_png(frame, measure)}
    md = [
        "{{figure:aq27_boxes}}",
        "",
        f"*AQ-27 scores ({measure}) of every prompt, mental and physical illnesses side by side, "
        "over all items and per stigma dimension; one panel per model (Figure 1 of Mina et al. "
        "2024).*",
        "",
        "{{figure:aq27_diffs}}",
        "",
        "*AQ-27: mean score of the mental minus the physical illnesses, over all items and per "
        "stigma dimension; one bar group per model (Figure 2 of Mina et al. 2024). Positive: "
        "mental illnesses more likely in the statement.*",
        "",
    ]
    return figures, md


def aq27_table(runs: dict[str, Path | str]) -> Table:
    """AQ-27 runs side by side: per dimension, the mental - physical difference with its
    Bonferroni-corrected Wilcoxon p-value and Cronbach's alpha; the illnesses scored; Figures 1
    and 2 of Mina et al. 2024 from the runs' records."""
    summaries = read_summaries(runs, "aq27", probe=True)
    names = list(summaries)
    overall = {n: summaries[n]["overall"] for n in names}
    cells = [["ALL", *(f"{_f(o['mean_diff'])} (p {_f(o['p'])})" for o in overall.values())]]
    rows = [
        {"run": n, "dimension": "all", "mean_diff": o["mean_diff"], "p": o["p"]}
        for n, o in overall.items()
    ]
    for dim in dict.fromkeys(d for s in summaries.values() for d in s["dimensions"]):
        by_run = {n: summaries[n]["dimensions"].get(dim, {}) for n in names}
        cells.append(
            [
                dim.capitalize(),
                *(
                    f"{_f(c.get('mean_diff'))} (p_bonf {_f(c.get('p_bonferroni'))}, α "
                    f"{_f(c.get('alpha'), 2)})"
                    for c in by_run.values()
                ),
            ]
        )
        rows += [
            {
                "run": n,
                "dimension": dim,
                **{k: c.get(k) for k in ("mean_diff", "p_bonferroni", "alpha")},
            }
            for n, c in by_run.items()
        ]
    counts = {n: _counts(s) for n, s in summaries.items()}
    cells.append(
        [
            "Illnesses scored",
            *(
                " + ".join(f"{k}/{of} {t}" for t, (k, of) in c.items()) or "–"
                for c in counts.values()
            ),
        ]
    )
    note = (
        "Cells: mean log-likelihood difference mental − physical (positive: mental illnesses "
        "more likely in the stigma statement), Wilcoxon signed-rank p (per dimension "
        "Bonferroni-corrected over 9 dimensions), Cronbach's α over mental illnesses. "
        "Illnesses scored: kept/given per type (the in-vocabulary filter, Mina et al. 2024 "
        "section 3.1)."
    )
    scorings = {s.get("scoring") for s in summaries.values()}
    measure = MEASURES.get(scorings.pop(), "score") if len(scorings) == 1 else "score"
    figures, figure_md = _figures(runs, measure)
    md = ["## Stigma: AQ-27 mental − physical (aq27)", "", *markdown_table(["", *names], cells)]
    md += [note, "", *figure_md]
    if "pll_word_l2r" in {s.get("scoring") for s in summaries.values()}:  # the paper's scoring
        from scd.eval.benchmarks.stigma.papers import mina_lines

        md += ["", *mina_lines(summaries)]
    return Table("\n".join(md), rows, "stigma-aq27", figures)
