"""Tables 11-14 by arm (scd.eval.benchmarks.bias.arm_transfer), on records written here: every
arm of a setting that holds out a dimension, on each held-out value, on the prompts all of them
answered, with cluster intervals, paired p-values Holm-corrected over the setting, and seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from scd.config.settings import load_settings
from scd.eval.benchmarks.bias.arm_transfer import arm_transfer_rows, arm_transfer_tables

CELLS = [  # 6 templates (the clusters) x 2 actions
    (p, s, a)
    for p in ("equal_status", "common_goals")
    for s in ("education", "workplace", "sports")
    for a in ("hire", "fire")
]


def _records(where: Path, biased: dict[str, float], skip: set[str] = frozenset()) -> str:
    """A bias result directory: per scale, 12 template cells x 10 descriptor prompts, the first
    ``biased[scale]`` share of each cell's prompts answered with the biased option."""
    rows = []
    for scale in ("certainty", "likelihood", "frequency"):
        for principle, scenario, action in CELLS:
            for i in range(10):
                pid = f"{scale}-{principle}-{scenario}-{action}-{i}"
                if pid in skip:
                    continue
                hit = i < round(10 * biased.get(scale, 0.0))
                rows.append(
                    {
                        "prompt_id": pid,
                        "principle": principle,
                        "scenario": scenario,
                        "action": action,
                        "scale": scale,
                        "axis": "religion",
                        "contact": "none",
                        "options": ["Yes", "No"],
                        "chosen": "No" if hit else "Yes",
                        "biased": hit,
                        "baseline": False,
                    }
                )
    where.mkdir(parents=True)
    (where / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(where)


@pytest.fixture
def layout(tmp_path: Path) -> dict:
    """Setting 3 (trains on certainty, holds out likelihood and frequency): the base model (30%
    biased), sft with two seeds (0% and 10%), and a steer arm that answers as the base model but
    skipped one prompt."""
    sft = tmp_path / "setting-3" / "sft"
    (sft / "heldout").mkdir(parents=True)
    held = ("likelihood", "frequency")
    ids = [f"{s}-{p}-{sc}-{a}-{i}" for s in held for p, sc, a in CELLS for i in range(10)]
    pd.DataFrame({"prompt_id": ids}).to_parquet(sft / "heldout" / "prompts.parquet")
    everywhere = {"certainty": 0.3, "likelihood": 0.3, "frequency": 0.3}

    def arm(name: str, result: str, **extra) -> dict:
        return {"arm": name, "setting": 3, "sft": str(sft), "evals": {"bias": result}, **extra}

    return {
        "arms": [
            {
                "arm": "base",
                "setting": None,
                "evals": {"bias": _records(tmp_path / "b", everywhere)},
            },
            arm("sft", _records(tmp_path / "s42", {}), seed=42),
            arm("sft", _records(tmp_path / "s7", {"likelihood": 0.1, "frequency": 0.1}), seed=7),
            arm(
                "steer",
                _records(
                    tmp_path / "st", everywhere, skip={"frequency-equal_status-education-hire-0"}
                ),
            ),
        ]
    }


def test_every_arm_on_each_held_out_value_on_the_same_prompts(layout: dict) -> None:
    rows = arm_transfer_rows(layout, load_settings())
    assert {r["value"] for r in rows} == {"likelihood", "frequency"}  # never the trained scale
    assert [r["arm"] for r in rows if r["value"] == "likelihood"] == ["base", "sft", "sft", "steer"]
    n = {(r["value"], r["arm"], r.get("seed")): r["bias_n"] for r in rows}
    assert {v for (value, *_), v in n.items() if value == "likelihood"} == {120}
    # a prompt one arm did not answer leaves every arm's row, the base model's too
    assert {v for (value, *_), v in n.items() if value == "frequency"} == {119}
    by = {(r["value"], r["arm"], r.get("seed")): r for r in rows}
    base = by["likelihood", "base", None]
    assert base["bias_pct"] == pytest.approx(30.0) and base["bias_p"] is None
    assert base["bias_templates"] == 6 and base["bias_ci_low"] <= 30 <= base["bias_ci_high"]
    assert by["likelihood", "sft", 42]["bias_pct"] == 0.0
    assert by["likelihood", "sft", 7]["bias_pct"] == pytest.approx(10.0)
    assert by["likelihood", "steer", None]["bias_p"] == 1.0  # the same answers as the base model
    assert by["likelihood", "steer", None]["bias_change_pts"] == 0.0
    sft = by["likelihood", "sft", 42]
    assert sft["bias_change_pts"] == pytest.approx(-30.0)
    assert sft["bias_change_ci_low"] <= -30 <= sft["bias_change_ci_high"] < 0
    tested = [r for r in rows if r["arm"] != "base"]
    assert all(r["bias_p_holm"] >= r["bias_p"] for r in tested)
    assert by["likelihood", "sft", 42]["bias_p"] < 0.05  # 30% -> 0% in each of 6 templates
    # Holm over the setting's six tests: the smallest p is multiplied by six
    smallest = min(tested, key=lambda r: r["bias_p"])
    assert smallest["bias_p_holm"] == pytest.approx(min(1.0, 6 * smallest["bias_p"]))


def test_the_table_shows_seeds_as_their_mean_and_range(layout: dict) -> None:
    (table,) = arm_transfer_tables(layout, load_settings())
    assert table.name == "table11_arms" and len(table.rows) == 8  # each seed its own tidy row
    md = table.markdown
    assert md.startswith("## Table 11 by arm: cross-scale transfer")
    assert "| 3 | Likelihood | sft | 5.0 (0.0–10.0) | -25.0 (-30.0–-20.0) | ≤ " in md
    assert "| 3 | Likelihood | base | 30.0 [" in md and "| 3 | Frequency | steer |" in md
    assert "the mean over them (lowest–highest)" in md


def test_no_table_without_a_held_out_dimension(layout: dict) -> None:
    for arm in layout["arms"][1:]:
        arm["setting"] = 1  # a random split: nothing held out by name
    assert arm_transfer_tables(layout, load_settings()) == []
    assert arm_transfer_tables({"settings": {}}, load_settings()) == []  # no arena


def test_the_held_out_values_are_those_the_run_used(layout: dict) -> None:
    """A setting from the recipe's own settings file: its SFT manifest says what it held out."""
    sft = Path(layout["arms"][1]["sft"])
    used = {"train": {"scale": ["certainty"]}, "eval": {"scale": ["frequency"]}}
    (sft / "manifest.json").write_text(json.dumps({"setting": 3, "used": used}))
    rows = arm_transfer_rows(layout, load_settings())
    assert {r["value"] for r in rows} == {"frequency"}
