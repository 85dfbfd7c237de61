"""Run bookkeeping and up-front validation: pinned recipes, stages, cache keys, bad recipes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from scd.errors import InputError
from scd.io import cache_key
from scd.models import model_fingerprint
from scd.pipeline.recipe import load_recipe, recipe_from_dict, validate_inputs
from scd.pipeline.state import RunState

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"


def test_a_run_dir_refuses_another_recipe_but_not_other_logging(tmp_path: Path) -> None:
    recipe = {"model": "toy", "train": {"learning_rate": 1e-3}, "wandb": {"enabled": False}}
    RunState(tmp_path / "run", recipe).hold_recipe()
    tracked = {**recipe, "wandb": {"enabled": True}}  # a tracking key: not held fixed
    RunState(tmp_path / "run", tracked).hold_recipe()
    changed = {**recipe, "train": {"learning_rate": 2e-3}}
    with pytest.raises(InputError, match=r"train\.learning_rate"):
        RunState(tmp_path / "run", changed).hold_recipe()
    keys = ("learning_rate", "max_steps", "seed", "logging_steps", "save_steps", "weight_decay")
    many = {**recipe, "train": {k: 7 for k in keys}}
    with pytest.raises(
        InputError, match=r"train\.\w+, train\.\w+, train\.\w+, train\.\w+ and 2 more"
    ):
        RunState(tmp_path / "run", many).hold_recipe()


def test_stages_are_done_only_while_their_outputs_exist(tmp_path: Path) -> None:
    state = RunState(tmp_path, {"model": "m"})
    out = tmp_path / "a.txt"
    out.write_text("x")
    state.finish("a", [out], time.perf_counter(), note=1)
    again = RunState(tmp_path, {"model": "m"})  # read back from state.json
    assert again.done("a") and not again.done("b")
    assert json.loads((tmp_path / "state.json").read_text())["stages"]["a"]["note"] == 1
    out.unlink()
    assert not again.done("a")


def test_fingerprints_follow_content(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"0" * 10)
    first = model_fingerprint(str(model))
    assert model_fingerprint(str(model)) == first
    (model / "model.safetensors").write_bytes(b"0" * 11)
    assert model_fingerprint(str(model)) != first
    assert model_fingerprint("meta-llama/Llama-2-7b-chat-hf") == "meta-llama/Llama-2-7b-chat-hf"
    assert cache_key(a=1, b=[1, 2]) == cache_key(b=[1, 2], a=1) != cache_key(a=2, b=[1, 2])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.backend=tgi", "eval.backend"),
        ("run.settings=[1, 9]", "setting 9"),
        ("run.settings=[3, 3]", "run.settings"),
        ("eval.sentiment.enabled=true", "eval.sentiment.enabled: scores sequence classifiers"),
        ("eval.bbq.enabled=true", "eval.bbq.data"),
        ("eval.bias.limit=0", "eval.bias.limit"),
        ("run.name=../x", "run.name"),
        ("eval.colour=red", "eval.colour"),
    ],
)
def test_bad_run_keys_fail_when_the_recipe_loads(override: str, message: str) -> None:
    with pytest.raises(InputError, match=message.replace(".", r"\.")):
        load_recipe(QUICKSTART, [override])


def test_missing_paths_fail_before_any_stage(tmp_path: Path) -> None:
    base = {"model": "toy", "data": {"descriptors": "toy"}}
    bbq = {"enabled": True, "data": str(tmp_path / "no-bbq")}
    with pytest.raises(InputError, match=r"eval\.bbq\.data"):
        validate_inputs(recipe_from_dict({**base, "eval": {"bbq": bbq}}))
    with pytest.raises(InputError, match=r"data\.prompts"):
        validate_inputs(recipe_from_dict({"model": "toy", "data": {"prompts": str(tmp_path)}}))
    with pytest.raises(InputError, match="model"):
        validate_inputs(recipe_from_dict({**base, "model": str(tmp_path / "missing" / "m")}))
    hub = {**bbq, "data": "someone/bbq"}  # a Hub dataset id: offline, the datasets cache answers
    validate_inputs(recipe_from_dict({**base, "eval": {"bbq": hub}}))
    with pytest.raises(InputError, match="^model meta-llama/x: not in the local Hub cache"):
        validate_inputs(recipe_from_dict({**base, "model": "meta-llama/x"}))  # offline


def test_a_run_that_fails_before_any_stage_finished_holds_no_recipe(tmp_path, monkeypatch):
    """Not only bad input: an error or Ctrl-C before the first stage finished takes recipe.json
    back, so the corrected recipe runs in the same directory."""
    from scd.pipeline.launch import run_recipe
    from scd.pipeline.recipe import load_recipe
    from scd.pipeline.run import Run

    def interrupted(self) -> None:
        assert (self.dir / "recipe.json").is_file()  # held while the run goes on
        raise KeyboardInterrupt

    monkeypatch.setattr(Run, "prepare", interrupted)
    recipe = load_recipe(QUICKSTART)
    with pytest.raises(KeyboardInterrupt):
        run_recipe(recipe, tmp_path / "run", tmp_path / "cache", progress=False, say=lambda _: 0)
    assert not (tmp_path / "run" / "recipe.json").exists()
    corrected = load_recipe(QUICKSTART, ["train.learning_rate=0.001"])
    assert RunState(tmp_path / "run", corrected.to_dict()).hold_recipe()  # written: not refused
