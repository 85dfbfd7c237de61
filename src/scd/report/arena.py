"""The arena: every arm of a run (``arms:``) on the same items, one row each --
``tables/arena.{md,csv,json}``, the report's "Arena" section and its Pareto figure.

A row holds each benchmark's own columns (:meth:`scd.eval.benchmarks.base.Benchmark.arena`:
held-out bias with its paired test against the base model, the descriptor effect, the answer
tendency, BBQ, the SDS gap) and the arm's capability cost (KL divergence from the base model on
neutral prompts; lm-evaluation-harness scores when the recipe lists tasks). Each ``*_p`` column
gets a Holm-corrected ``*_p_holm`` over the arms of its setting (the base row, compared with
itself, is left out of the correction).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.config.schema import ARMS
from scd.config.vocabulary import RunLayout
from scd.eval.benchmarks import REGISTRY
from scd.eval.benchmarks.base import Table, markdown_table, save_table
from scd.io import read_json

__all__ = ["arena_rows", "arena_section", "arena_table"]


def _capability(path: str | None) -> dict[str, Any]:
    if not path or not (Path(path) / "summary.json").is_file():
        return {}
    s = read_json(Path(path) / "summary.json")
    kl = s.get("kl", {})
    cols = {k: kl.get(k) for k in ("kl_mean", "kl_ci_low", "kl_ci_high", "logp_delta")}
    cols["kl_n_prompts"] = kl.get("n_prompts")
    cols.update({f"lm_eval/{k}": v for k, v in (s.get("lm_eval") or {}).items()})
    return cols


def _holm(rows: list[dict[str, Any]]) -> None:
    """``<col>_holm`` beside each ``*_p`` column, over the non-base rows of each setting."""
    from statsmodels.stats.multitest import multipletests

    keys = sorted({k for r in rows for k in r if k.endswith("_p")})
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


def arena_rows(layout: RunLayout) -> list[dict[str, Any]]:
    """One row per setting and arm (the base model's row repeated for each setting, on that
    setting's items), from a run's ``layout.json``."""
    arms = layout["arms"]
    base = next(a for a in arms if a["arm"] == "base")
    rows = []
    for setting in dict.fromkeys(a["setting"] for a in arms if a["setting"] is not None):
        group = [a for a in arms if a["setting"] == setting]
        for arm in [base, *group]:
            row: dict[str, Any] = {
                "setting": setting,
                "arm": arm["arm"],
                "what": ARMS.get(arm["arm"], ""),
            }
            for name, bench in REGISTRY.items():
                items = next((a["evals"][name] for a in group if name in a["evals"]), None)
                before = bench.base_job(Path(group[0]["sft"]))  # the base model's "before"
                if items is None or before not in base["evals"]:
                    continue
                against = Path(base["evals"][before])
                result = against if arm is base else Path(arm["evals"].get(name, ""))
                if arm is base or name in arm["evals"]:
                    row.update(bench.arena(result, against, Path(items)))
            row.update(_capability(arm.get("capability")))
            rows.append(row)
    _holm(rows)
    return rows


def _num(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ci(row: dict, key: str, digits: int = 1) -> str:
    """``value [low, high]``: the interval's columns are named after ``key`` less its unit
    (``bias_pct`` -> ``bias_ci_low``, ``kl_mean`` -> ``kl_ci_low``)."""
    if row.get(key) is None:
        return "–"
    stem = key.removesuffix("_pct").removesuffix("_pts").removesuffix("_mean")
    lo, hi = row.get(f"{stem}_ci_low"), row.get(f"{stem}_ci_high")
    tail = f" [{_num(lo, digits)}, {_num(hi, digits)}]" if lo is not None else ""
    return _num(row[key], digits) + tail


def _p(row: dict, key: str) -> str:
    p, holm = row.get(key), row.get(f"{key}_holm")
    if p is None or row["arm"] == "base":
        return "–"
    return f"{p:.2g} ({holm:.2g})" if holm is not None else f"{p:.2g}"


def _tendency(row: dict) -> str:
    found = [
        (k.split("_")[1], k.split("_")[2], v)
        for k, v in row.items()
        if k.startswith("tendency_") and v is not None
    ]
    return ", ".join(f"{option.capitalize()} {v:.0f}%" for _, option, v in found) or "–"


def arena_table(layout: RunLayout) -> Table:
    """The arena as Markdown (two tables: bias; cost and transfer) and tidy rows."""
    rows = arena_rows(layout)
    bias = [
        [
            r["setting"],
            r["arm"],
            _ci(r, "bias_pct"),
            _p(r, "bias_p"),
            _ci(r, "baseline_pct"),
            _ci(r, "descriptor_effect_pts"),
            _tendency(r),
            r.get("bias_n", "–"),
        ]
        for r in rows
    ]
    head = [
        "Setting",
        "Arm",
        "Bias % [95% CI]",
        "p vs base (Holm)",
        "Baseline %",
        "Descriptor effect, pts",
        "Answer tendency",
        "n",
    ]
    lm = sorted({k for r in rows for k in r if k.startswith("lm_eval/") and "stderr" not in k})
    cost = [
        [
            r["setting"],
            r["arm"],
            _ci(r, "kl_mean", 4),
            _num(r.get("logp_delta"), 3),
            _ci(r, "bbq_accuracy", 3),
            _ci(r, "bbq_acc_amb", 3),
            _ci(r, "bbq_acc_dis", 3),
            _num(r.get("bbq_unknown_amb_pct")) + " / " + _num(r.get("bbq_unknown_dis_pct")),
            _ci(r, "bbq_s_dis", 3),
            _ci(r, "bbq_s_amb", 3),
            _p(r, "bbq_p"),
            _ci(r, "sds_gap", 3),
            *(_num(r.get(k), 3) for k in lm),
        ]
        for r in rows
    ]
    cost_head = [
        "Setting",
        "Arm",
        "KL from base [95% CI]",
        "Δ log-lik/token",
        "BBQ accuracy",
        "BBQ ambiguous",
        "BBQ disambiguated",
        '"unknown" % amb / dis',
        "s_DIS",
        "s_AMB",
        "BBQ p vs base (Holm)",
        "SDS gap",
        *(k.removeprefix("lm_eval/") for k in lm),
    ]
    lines = [
        "Arena: every arm on the same held-out items (bias % with 95% Wilson intervals; p: exact "
        "McNemar against the base model on the same prompts, Holm-corrected across arms in "
        "brackets; the descriptor effect is bias minus the descriptor-free baseline of the same "
        "templates, with a bootstrap interval).",
        "",
        *markdown_table(head, bias),
        "What each arm cost, and what it did elsewhere (KL: mean D_KL(arm ‖ base) per token of "
        "the reference replies to neutral prompts, bootstrap interval over prompts; BBQ accuracy "
        "with Wilson intervals, s_DIS / s_AMB with bootstrap intervals, p: exact McNemar on "
        "correctness; SDS: P(negative) of stigmatized minus non-stigmatized conditions).",
        "",
        *markdown_table(cost_head, cost),
    ]
    return Table("\n".join(lines), rows, "arena")


def _pareto(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    points = []
    for r in rows:
        base = next(b for b in rows if b["setting"] == r["setting"] and b["arm"] == "base")
        if r.get("kl_mean") is None or r.get("bias_pct") is None or base.get("bias_pct") is None:
            continue
        gain = base["bias_pct"] - r["bias_pct"]
        label = (
            r["arm"] if len({x["setting"] for x in rows}) == 1 else f"{r['arm']} ({r['setting']})"
        )
        points.append(
            {
                "label": label,
                "cost": r["kl_mean"],
                "cost_low": r.get("kl_ci_low"),
                "cost_high": r.get("kl_ci_high"),
                "gain": gain,
                "gain_low": base["bias_pct"] - r["bias_ci_high"],
                "gain_high": base["bias_pct"] - r["bias_ci_low"],
            }
        )
    return pd.DataFrame(points)


def arena_section(layout: RunLayout, tables: Path, figures: dict[str, bytes]) -> list[str]:
    """The report's "Arena" section (and ``tables/arena.*``, ``figures/arena.png``)."""
    from scd.eval.benchmarks.figures import pareto_png

    table = arena_table(layout)
    save_table(tables, table)
    lines = ["## Arena", "", table.markdown.rstrip(), ""]
    frame = _pareto(table.rows)
    if len(frame):
        figures["arena"] = pareto_png(frame, title="Bias reduction against capability cost")
        lines += [
            "{{figure:arena}}",
            "",
            "*Figure A. Each arm's bias reduction on the held-out "
            "prompts (base minus arm, points; bars: the arm's 95% Wilson interval, the base "
            "taken as fixed) against its KL divergence from the base model on neutral "
            "prompts (bars: bootstrap interval); the dashed line joins the arms that no "
            "other beats on both.*",
            "",
        ]
    lines += [
        "How to read it: an arm that removed a bias tied to the groups named lowers bias while "
        "its descriptor-free baseline stays where it was, so the descriptor effect falls; an arm "
        "that learned an answer rule (answering by the action, whoever is named) takes bias and "
        "baseline down together and moves the answer tendency. BBQ's disambiguated accuracy "
        'falling, or its "unknown" rate rising on disambiguated items, is over-correction. A '
        "KL near 0 means the arm answers neutral prompts as the base model does; it cannot show "
        "a loss of skills the neutral prompts do not exercise (list lm-eval tasks for those).",
        "",
    ]
    return lines
