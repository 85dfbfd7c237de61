"""Padding-free batches (``train.padding_free``): the same training as padded ones."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scd.errors import InputError
from scd.pipeline.recipe import load_recipe
from scd.train.arms import method_class
from scd.train.arms.sft import SFT
from scd.train.method_trainer import build_trainer
from scd.train.setup import padding_free_keys
from scd.train.sft_rows import prepare_data
from scd.train.spec import TrainingSpec
from scd.train.trainer import train

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"


def _recipe(model: Path, out: Path, *extra: str):
    return load_recipe(QUICKSTART, [f"model={model}", f"output_dir={out}", *extra])


def _steps(out: Path, step: int) -> list[tuple[float, float]]:
    state = out / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json"
    log = json.loads(state.read_text())["log_history"]
    return [(h["loss"], h["grad_norm"]) for h in log if "loss" in h]


@pytest.fixture(scope="module")
def end_padded_toy(toy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy model with no pad token of its own: pad = its end token, as SmolLM2's and
    Llama 2's are (a padding-free batch has no attention mask to tell them apart)."""
    out = tmp_path_factory.mktemp("padding-free") / "toy"
    shutil.copytree(toy_model, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    del config["pad_token"]
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def test_padding_free_batches_train_as_padded_ones(end_padded_toy: Path, tmp_path: Path) -> None:
    """The same rows per step, the same losses and gradient norms step by step, the same tokens
    counted; what ran is recorded, and the recipe keeps its max_length."""
    keys = ["train.max_steps=5", "train.logging_steps=1", "train.save_steps=100"]
    runs = {}
    for name, free in (("padded", "false"), ("free", "true")):
        out = tmp_path / name
        info = train(
            _recipe(end_padded_toy, out, *keys, f"train.padding_free={free}"),
            use_wandb=False,
            progress=False,
        )
        runs[name] = (_steps(out, 5), info, yaml.safe_load((out / "recipe.yaml").read_text()))
    (padded, padded_info, padded_yaml), (free, free_info, free_yaml) = runs["padded"], runs["free"]
    assert len(free) == len(padded) == 5
    for (loss, grad), (loss0, grad0) in zip(free, padded):
        assert loss == pytest.approx(loss0, rel=1e-4) and grad == pytest.approx(grad0, rel=1e-4)
    # every row's end token counted (it is the pad token here), none of the padded batches' pads
    assert free_info["tokens_seen"] == padded_info["tokens_seen"]
    assert (free_info["ran"]["padding_free"], padded_info["ran"]["padding_free"]) == (True, False)
    assert (free_yaml["train"]["padding_free"], padded_yaml["train"]["padding_free"]) == (
        True,
        False,
    )
    assert free_yaml["train"]["max_length"] == padded_yaml["train"]["max_length"] == 512


def test_rows_over_max_length_are_cut_as_the_padded_path_cuts_them(
    toy_model: Path, tmp_path: Path, monkeypatch
) -> None:
    """TRL takes no max_length with padding-free batches; scd cuts the rows itself, to exactly
    the tokens (and labels) TRL's padded path keeps, dropping the same rows."""
    monkeypatch.setattr(SFT, "check_tokens", lambda *args: 0)  # cut rows fail scd's own check
    rows_of = {}
    for free in (False, True):
        out = tmp_path / str(free)
        keys = ["train.max_length=40", "train.eval_steps=100", f"train.padding_free={free}"]
        recipe = _recipe(toy_model, out, *keys)
        spec = TrainingSpec.of(recipe)
        rows = prepare_data(spec, out, SFT())
        trainer, _ = build_trainer(spec, str(toy_model), rows, cuda=False)
        assert trainer.args.padding_free is trainer.data_collator.padding_free is free
        rows_of[free] = [
            data.select_columns(["input_ids", "labels"]).to_list()
            for data in (trainer.train_dataset, trainer.eval_dataset)
        ]
    for padded, free_rows in zip(rows_of[False], rows_of[True]):
        assert max(len(r["input_ids"]) for r in free_rows) == 40  # rows were longer: cut
        assert len({len(r["input_ids"]) for r in padded}) > 1  # padded batches hold pad tokens
        assert free_rows == padded


def test_padding_free_keys_of_each_method(toy_model: Path) -> None:
    recipe = _recipe(toy_model, Path("unused"))
    assert recipe.train.padding_free is False  # padded unless asked (a CPU step is slower)
    sft, dpo = SFT(), method_class("dpo")()
    train = recipe.train
    assert padding_free_keys(sft, train) == padding_free_keys(dpo, train) == {"padding_free": False}
    asked = dataclasses.replace(train, padding_free=True)
    assert padding_free_keys(sft, asked) == {"padding_free": True, "max_length": None}
    packed = dataclasses.replace(asked, packing=True)
    assert padding_free_keys(sft, packed) == {"padding_free": True}  # packing cuts to max_length
    with pytest.raises(InputError, match=r"^train.padding_free: dpo has no padding-free batches"):
        padding_free_keys(dpo, asked)


def test_a_method_without_padding_free_batches_is_refused_in_one_line(
    toy_model: Path, tmp_path: Path
) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((QUICKSTART).read_text())
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "scd", "train", str(recipe), "--method", "kto"]
    cmd += ["--set", f"model={toy_model}", "--set", f"output_dir={out}"]
    done = subprocess.run(
        [*cmd, "--set", "train.padding_free=true"], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "scd: error: train.padding_free: kto has no padding-free batches in TRL (only sft); "
        "set it false"
    ]
    assert not out.exists()


@pytest.mark.parametrize("paper", ["llama-2-7b-chat", "llama-2-13b-chat"])
def test_the_papers_recipes_keep_padded_batches(paper: str) -> None:
    paths = sorted((REPO / "recipes" / paper).glob("*.yaml"))
    assert len(paths) >= 9
    for path in paths:  # said in each, whatever the default becomes
        assert yaml.safe_load(path.read_text())["train"]["padding_free"] is False, path.name


def test_an_arena_asking_it_of_a_preference_arm_is_refused_before_any_work(
    tmp_path: Path,
) -> None:
    out = tmp_path / "outputs"
    cmd = [sys.executable, "-m", "scd", "run", str(REPO / "recipes" / "arena-quickstart.yaml")]
    cmd += ["--outputs", str(out), "--set", "train.padding_free=true"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.endswith(
        "train.padding_free: dpo and kto have no padding-free batches in TRL (only sft); "
        "set it false"
    )
    assert not out.exists()
