"""Contrast training data (scd.data_gen.contrast, the contrast arms): the training cues are not
the evaluation cues and sit on other templates, the twins are balanced and stay on the setting's
training side, and -- checked on the rows each contrast arm writes -- no training row holds an
evaluation cue's text and no twin is written from a judgment's held-out template."""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from scd.config.schema import DataSpec
from scd.data_gen.contrast import (
    heldout_templates,
    load_training_cues,
    training_cues_path,
    twin_count,
    twins,
)
from scd.data_gen.relevance import DIRECTIONS, compile_prompt, cue_rows, load_cues
from scd.data_gen.sft import write_sft
from scd.data_gen.templates import load_scales, load_templates
from scd.errors import InputError


def _evaluation_cues() -> list[str]:
    return [c for t in load_cues().values() for d in DIRECTIONS for c in t[d]]


def test_training_cues_sit_on_the_other_half_of_the_templates() -> None:
    held = heldout_templates()
    trained = load_training_cues()
    assert len(held) == len(trained) == 15 and not set(held) & set(trained)
    assert {t.template_id for t in load_templates()} == set(held) | set(trained)
    # a checkerboard: 3 held-out templates per scenario, 2 or 3 per principle
    by_scenario = collections.Counter(t.split(".")[1] for t in held)
    by_principle = collections.Counter(t.split(".")[0] for t in held)
    assert set(by_scenario.values()) == {3} and set(by_principle.values()) <= {2, 3}
    evaluation = [c.lower() for c in _evaluation_cues()]
    for cues in trained.values():
        for d in DIRECTIONS:
            assert len(cues[d]) == 3
            for cue in cues[d]:
                assert not any(e in cue.lower() or cue.lower() in e for e in evaluation), cue


def test_a_cue_file_that_breaks_the_split_is_refused_in_one_line(tmp_path: Path) -> None:
    shipped = yaml.safe_load(training_cues_path().read_text())["cues"]
    held = heldout_templates()[0].split(".")
    leak = tmp_path / "held.yaml"
    leak.write_text(
        yaml.safe_dump(
            {"cues": [{"principle": held[0], "scenario": held[1], "against": ["x"], "for": ["y"]}]}
        )
    )
    with pytest.raises(InputError, match="held-out templates") as err:
        load_training_cues(leak)
    assert "\n" not in str(err.value) and str(leak) in str(err.value)
    copied = tmp_path / "copied.yaml"
    evaluation = load_cues()[f"{shipped[0]['principle']}.{shipped[0]['scenario']}"]["against"][0]
    copied.write_text(yaml.safe_dump({"cues": [{**shipped[0], "against": [evaluation]}]}))
    with pytest.raises(InputError, match="holds the evaluation cue"):
        load_training_cues(copied)


def test_twins_are_balanced_seeded_and_on_the_training_side() -> None:
    filters = {"scale": ["certainty"], "scenario": ["education", "workplace", "sports"]}
    rows = twins(80, {**filters, "axis": ["religion"]}, seed=42)  # axis: not a twin's
    assert len(rows) == 80 == len({r["prompt_id"] for r in rows})  # a pool of 108: no repeats
    cells = collections.Counter((r["action"], r["direction"]) for r in rows)
    assert set(cells.values()) == {20}
    assert all(r["scale"] == "certainty" and r["scenario"] in filters["scenario"] for r in rows)
    assert all(r["prompt_id"].startswith("contrast.") for r in rows)
    assert rows == twins(80, filters, seed=42) and rows != twins(80, filters, seed=7)
    for r in rows:  # the answer the fact warrants: "for" cues the pro-social one
        assert (r["warranted_answer"] == r["pro_social_answer"]) == (r["direction"] == "for")
    many = twins(300, filters, seed=0)  # more than the pool: gone through again
    assert len(many) == 300 and len({r["prompt_id"] for r in many}) == 108
    assert twin_count(240, 0.25) == 80 and twin_count(240, 0.0) == 0
    with pytest.raises(InputError, match="training side"):
        twins(10, {"scenario": ["nowhere"]}, seed=0)


def _heldout_questions() -> list[tuple[str, str]]:
    """The held-out templates' no-contact questions as (the text up to the cue, the text after
    the last group mention): what a twin written from one of them would start and end with."""
    held, scales = set(heldout_templates()), list(load_scales().values())
    out = []
    for t in (t for t in load_templates() if t.template_id in held):
        for action in ("positive", "negative"):
            for scale in scales:
                q = compile_prompt(t, "none", action, scale)
                out.append((q.parts[0] + q.nouns[0] + " ", q.parts[-1]))
    return out


@pytest.mark.parametrize("arm", ["sft-contrast", "dpo-contrast", "kto-contrast"])
@pytest.mark.parametrize("setting", [1, 3, 6])
def test_no_training_row_holds_an_evaluation_cue_or_a_held_out_template(
    arm: str, setting: int, toy_prompts: Path, tmp_path: Path
) -> None:
    from scd.train.arms import arena_spec_class, arm_class
    from scd.train.arms.base import RowsInput

    sft = tmp_path / "sft"
    write_sft(toy_prompts, setting, sft, max_train=60, max_eval=10, seed=3)
    data = DataSpec(setting=setting, seed=3)
    arena = arena_spec_class()(contrast_share=0.4)
    out = tmp_path / "rows"
    info = arm_class(arm)().write_rows(RowsInput(sft, (toy_prompts,), data, arena), out)
    scd_rows = pq.read_table(sft / "train.parquet").num_rows
    assert info["twins"]["rows"] == twin_count(scd_rows, 0.4) > 0
    rows = pq.read_table(out / "train.parquet").to_pylist()
    twin_rows = [r for r in rows if r["prompt_id"].startswith("contrast.")]
    assert twin_rows and len(rows) > len(twin_rows)
    texts = [m["content"] for r in rows for m in r["prompt"]]
    evaluation, questions = _evaluation_cues(), _heldout_questions()
    assert not any(c in t for c in evaluation for t in texts)
    held = set(heldout_templates())
    for r in twin_rows:
        principle, scenario = r["prompt_id"].split(".")[1:3]
        assert f"{principle}.{scenario}" not in held
        user = next(m["content"] for m in r["prompt"] if m["role"] == "user")
        assert not _from_heldout(user, questions), user
    # the check finds a twin written from a held-out template
    leaked = cue_rows({heldout_templates()[0]: {"against": ["who cheat"], "for": ["who win"]}}, "x")
    assert all(_from_heldout(f"{r['prompt']} {r['instruction']}", questions) for r in leaked)


def _from_heldout(user: str, questions: list[tuple[str, str]]) -> bool:
    return any(user.startswith(a) and b in user for a, b in questions)
