"""The arena's rows: one per setting and arm of a run (``arms:``), on the same items.

A row holds each benchmark's own columns (:meth:`scd.eval.benchmarks.base.Benchmark.arena`) and
the arm's capability cost (KL divergence from the base model on neutral prompts;
lm-evaluation-harness scores when the recipe lists tasks). Each p-value column gets a
Holm-corrected ``<key>_holm`` over the arms of its setting (the base row, compared with itself,
is left out of the correction), and so does the same test over the other cluster unit
(``<key>_other``). The run's cluster unit (``arena.cluster_unit``) goes to every clustered
benchmark. This module names no benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.config.vocabulary import RunLayout
from scd.eval.benchmarks import REGISTRY
from scd.io import read_json
from scd.train.arms import arm_class, arm_names

__all__ = ["arena_rows", "what_arm_is"]


def what_arm_is(arm: str) -> str:
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
                "what": what_arm_is(arm["arm"]),
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
