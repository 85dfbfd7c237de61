"""The stigma papers' own numbers (``papers.yaml``, with their sources) beside scd's, for the
models the given runs evaluated; a paper model no run evaluated is listed as such.

A run is matched to a paper model by the last part of the model it evaluated (``run.model`` of
its summary: ``FacebookAI/roberta-large`` and ``/models/roberta-large`` are both RoBERTa-large),
else by the name ``--runs`` gave it.
The papers' checkpoints may differ from today's Hub revisions, and scd's prompts and lexicon are
the papers' but its aggregation code is its own: read a difference as "reproduced or not", not
as a measured change.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import PurePath
from typing import Any

import yaml

from scd.eval.benchmarks.stigma.common import fmt, gap_cell
from scd.eval.benchmarks.tables import markdown_table

__all__ = ["match", "mei_lines", "mei_correlation_line", "mina_lines", "paper_numbers"]


@cache
def paper_numbers() -> dict[str, Any]:
    """``papers.yaml``: ``{"mei2023": ..., "mina2024": ...}``."""
    text = (files("scd.eval.benchmarks.stigma") / "papers.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def match(summaries: dict[str, dict[str, Any]], ids: list[str]) -> str | None:
    """The first run whose model's last path part is one of ``ids``, else the first run so
    named (``--runs roberta-large=DIR`` for a model kept under another name)."""
    wanted = {i.lower() for i in ids}
    models = {
        n: PurePath(str(s.get("run", {}).get("model", ""))).name for n, s in summaries.items()
    }
    found = [n for n, m in models.items() if m.lower() in wanted]
    found += [n for n in summaries if n.lower() in wanted]
    return found[0] if found else None


def mei_lines(probe: str, summaries: dict[str, dict[str, Any]], pooled: dict) -> list[str]:
    """Mei et al.'s per-model gaps (``mlm`` or ``sentiment``) and the pooled counts beside the
    given runs'."""
    mei = paper_numbers()["mei2023"]
    entries, p = mei[f"{probe}_gap"], mei["pooled"]
    rows, missing = [], []
    for e in entries:
        run = match(summaries, e["ids"])
        missing += [] if run else [e["model"]]
        scd = f"{gap_cell(summaries[run]['gap'])} (`{run}`)" if run else "no run of this model"
        rows.append([e["model"], f"{e['gap']:+.2f}", scd])
    above, n = pooled["above"], pooled["n_conditions"]
    if probe == "mlm":
        rows.append(
            [
                f"Pooled: stigmatized conditions above 0.5 ({p['mlm_models']} models)",
                f"{p['stigmatized_above_half']} of {p['stigmatized_conditions']}",
                f"{len(above['stigmatized'])} of {n['stigmatized']} ({len(summaries)} run(s))",
            ]
        )
        rows.append(
            [
                "Pooled: non-stigmatized above 0.5",
                f"{p['non_stigmatized_above_half']} of {p['non_stigmatized_conditions']}",
                f"{len(above['non_stigmatized'])} of {n['non_stigmatized']}",
            ]
        )
        rows.append(
            [
                "Mean of the models' gaps",
                f"{p['mlm_mean_gap']:+.2f}",
                fmt(_mean_gap(summaries), sign=True),
            ]
        )
    what = "masked LMs" if probe == "mlm" else "sentiment classifiers"
    lines = [
        f"## Beside Mei et al. 2023: {what}",
        "",
        *markdown_table(["", "Paper", "scd [95% CI]"], rows),
        f"Paper: {' '.join(mei['source'].split())}.",
    ]
    if missing:
        lines.append(f"Not compared (no run of the model given): {', '.join(missing)}.")
    return [*lines, ""]


def _mean_gap(summaries: dict[str, dict[str, Any]]) -> float | None:
    gaps = [s["gap"]["gap"] for s in summaries.values() if s["gap"]["gap"] is not None]
    return sum(gaps) / len(gaps) if gaps else None


def mei_correlation_line(corr: dict[str, Any]) -> str:
    """The paper's r beside the pooled runs' r."""
    p = paper_numbers()["mei2023"]["pooled"]
    r = corr["pearson"]
    return (
        f"Mei et al. 2023 report r = {p['pearson_r']} (p {p['pearson_p']}) over "
        f"{p['correlation_conditions']} conditions, pooling 6 masked LMs and 4 classifiers; "
        f"the runs given: r = {fmt(r['r'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}] over "
        f"{r['n']}."
    )


def _stars(p: float | None) -> str:
    if p is None:
        return "–"
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else "n.s."


def mina_lines(summaries: dict[str, dict[str, Any]]) -> list[str]:
    """Mina et al.'s Table 2 (significance and alpha per dimension) beside the runs of the same
    models; the models no run evaluated are named."""
    mina = paper_numbers()["mina2024"]
    lines, missing = [], []
    for e in mina["aq27"]:
        run = match(summaries, e["ids"])
        if run is None:
            missing.append(e["model"])
            continue
        s = summaries[run]
        rows = []
        for dim, (sig, alpha) in e["dimensions"].items():
            r = s["overall"] if dim == "all" else s["dimensions"].get(dim, {})
            p = r.get("p") if dim == "all" else r.get("p_bonferroni")
            rows.append(
                [
                    dim.capitalize(),
                    sig,
                    fmt(alpha, 2) if alpha is not None else "–",
                    _stars(p),
                    fmt(r.get("alpha"), 2) if r.get("alpha") is not None else "–",
                ]
            )
        lines += [
            f"### {e['model']} (`{run}`)",
            "",
            *markdown_table(["Dimension", "Paper", "Paper α", "scd", "scd α"], rows),
        ]
    head = ["## Beside Mina et al. 2024: AQ-27", ""]
    tail = [f"Paper: {' '.join(mina['source'].split())}."]
    if missing:
        tail.append(f"Not compared (no run of the model given): {', '.join(missing)}.")
    return [*head, *lines, *tail, ""]
