"""The steer arm on a toy with a known steering direction (``toy_model.steer_layer``): the arm,
as ``scd run`` runs it, takes held-out bias well below the base model's, whatever the number of
threads the toy was trained with (a different float order: a different trained model).

The planted-bias toy alone cannot show it: it computes nothing at the answer token that depends
on the answer being the unbiased or the biased one, so the answer-token vector is noise to it
(see tests/eval/test_steering.py). This toy is also taught a direction at layer 1 that its
answer token reads after the unbiased vs the biased answer and that its answers follow
(scd.models.toy_direction): whether the arm finds it -- computes the vector at the answer
token, balanced over the unbiased answers, adds it from the assistant's turn on, and keeps the
planted layer by the mean validation margin, on validation prompts none of which is held out
-- is what the test asserts."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from cli_run import run_scd  # tests/cli_run.py
from search_checks import assert_no_heldout_prompt  # tests/eval/search_checks.py

RECIPE = {
    "model": "toy",
    "toy_model": {"steer_layer": 1},
    "arms": ["base", "steer"],
    "arena": {
        "steer_layers": [0, 1, 2],
        "steer_scales": [-1, 0.5, 0.7, 1, 1.25],
        # the toy's neutral prompts are mostly <unk> to its word-level vocabulary: the KL there
        # says little, and the bound of a real model would keep scale 0 (issue "A steering arm")
        "steer_max_kl": None,
    },
    "data": {"descriptors": "toy", "setting": 1, "max_train": 200, "max_eval": 20},
    "eval": {"batch_size": 64, "bias": {"enabled": True}},
    "capability": {"batch_size": 16},
    "wandb": {"enabled": False},
}


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_the_steer_arm_takes_the_toys_bias_well_below_the_base(threads, tmp_path, monkeypatch):
    recipe = tmp_path / "steer.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    monkeypatch.setenv("SCD_THREADS", str(threads))  # where scd chooses torch's threads itself
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # the toy is built (and scored) by this run
    try:
        code, _, err = run_scd("run", str(recipe), "--outputs", str(tmp_path), "--run-id", "r")
    finally:
        torch.set_num_threads(before)
    assert code == 0, err[-3000:]
    rows = {r["arm"]: r for r in json.loads((tmp_path / "r/tables/arena.json").read_text())}
    base, steer = rows["base"], rows["steer"]
    assert base["bias_ci_low"] > 20  # the planted bias: religion and nationality, 2 of 8 axes
    assert steer["bias_ci_high"] < base["bias_ci_low"]
    assert steer["bias_pct"] <= base["bias_pct"] / 3, (base["bias_pct"], steer["bias_pct"])
    assert steer["bias_p_holm"] < 0.01
    (toy,) = (tmp_path / "cache" / "toy-model").iterdir()
    planted = json.loads((toy / "toy_model.json").read_text())["steering_direction"]
    assert planted["layer"] == 1 and planted["pushed_accuracy"] >= 0.995
    info = json.loads((tmp_path / "r/setting-1/arm-steer/vector/steer.json").read_text())
    assert info["scale"] > 0  # towards the unbiased answer, as the vector is signed
    assert info["layer"] == planted["layer"] and info["positions"] == "answer"
    assert "highest mean validation margin" in info["why"]
    assert_no_heldout_prompt(info["validation_prompts"], tmp_path / "r/setting-1/sft")


def test_a_steer_layer_the_toy_does_not_have_is_one_line(tmp_path) -> None:
    out = tmp_path / "toy"
    code, _, err = run_scd("toy-model", "--out", str(out), "--steer-layer", "3")
    assert code == 2 and err.count("\n") == 1 and "--steer-layer 3" in err and "0 to 2" in err, err
    assert not out.exists()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({**RECIPE, "toy_model": {"steer_layer": 5}}))
    code, _, err = run_scd("run", str(recipe), "--outputs", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and "toy_model.steer_layer" in err, err
    assert not (tmp_path / "o").exists()
