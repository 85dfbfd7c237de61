"""The 8 transfer settings and the SFT data built from them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from scd.config.settings import load_settings, split_masks
from scd.data_gen.sft import write_sft
from scd.errors import InputError

COLUMNS = ["set_id", "prompt", "principle", "scenario", "scale", "axis", "contact"]


@pytest.fixture(scope="module")
def hb_table(hb_prompts: Path):
    return pq.read_table(hb_prompts / "prompts.parquet", columns=COLUMNS)


@pytest.mark.parametrize("number", [1, 3, 4, 5, 6, 7, 8])
def test_settings_never_overlap(hb_table, number: int) -> None:
    setting = load_settings()[number]
    train, held = split_masks(hb_table, setting, seed=7)
    assert train.any() and held.any()
    assert not (train & held).any()
    ids = np.asarray(hb_table["set_id"].to_pylist(), dtype=object)
    prompts = np.asarray(hb_table["prompt"].to_pylist(), dtype=object)
    assert not set(ids[train]) & set(ids[held])
    assert not set(prompts[train]) & set(prompts[held])
    for key, values in setting.train.items():
        column = np.asarray(hb_table[key].to_pylist(), dtype=object)
        assert set(column[train]) == set(values)
        assert set(column[held]) == set(setting.eval[key])


def test_setting1_is_a_seeded_random_split_by_set(hb_table) -> None:
    setting = load_settings()[1]
    a, _ = split_masks(hb_table, setting, seed=1)
    b, _ = split_masks(hb_table, setting, seed=1)
    c, _ = split_masks(hb_table, setting, seed=2)
    assert (a == b).all() and not (a == c).all()
    held = ~a
    assert abs(held.mean() - setting.eval_fraction) < 0.01


def test_setting8_covers_all_13_axes(hb_table) -> None:
    s8 = load_settings()[8]
    assert len(s8.train["axis"]) == 6 and len(s8.eval["axis"]) == 7
    assert set(s8.train["axis"]) | set(s8.eval["axis"]) == set(hb_table["axis"].to_pylist())


def test_setting2_trains_on_holistic_bias_and_evaluates_on_stigma(
    hb_prompts: Path, stigma_prompts: Path, tmp_path: Path
) -> None:
    info = write_sft(
        hb_prompts, 2, tmp_path / "s2", eval_prompts=stigma_prompts, max_train=50, max_eval=20
    )
    held = pq.read_table(tmp_path / "s2/heldout/prompts.parquet")
    train_all = set(pq.read_table(hb_prompts / "prompts.parquet")["prompt"].to_pylist())
    assert held.num_rows == info["counts"]["heldout_prompts"] > 0
    manifest = json.loads((tmp_path / "s2/heldout/manifest.json").read_text())
    assert manifest["kind"] == "heldout_prompts" and manifest["setting"] == 2
    assert not set(held["prompt"].to_pylist()) & train_all
    assert any("who have" in p for p in held["prompt"].to_pylist())
    with pytest.raises(InputError, match="--eval-prompts"):
        write_sft(hb_prompts, 2, tmp_path / "s2b")


def test_sft_rows_are_balanced_and_answer_unbiased(hb_prompts: Path, tmp_path: Path) -> None:
    info = write_sft(hb_prompts, 3, tmp_path / "s3", max_train=40, max_eval=10, style="short")
    train = pq.read_table(tmp_path / "s3/train.parquet").to_pylist()
    cols = ["prompt_id", "contact", "scale", "prompt", "instruction", "unbiased_answer"]
    prompts = {
        r["prompt_id"]: r
        for r in pq.read_table(hb_prompts / "prompts.parquet", columns=cols).to_pylist()
    }
    assert len(train) == info["counts"]["train"] == 3 * 40
    contacts = [prompts[r["prompt_id"]]["contact"] for r in train]
    assert {c: contacts.count(c) for c in set(contacts)} == {
        "none": 40,
        "positive": 40,
        "negative": 40,
    }
    for r in train:
        src = prompts[r["prompt_id"]]
        assert src["scale"] == "certainty"  # setting 3 trains on certainty only
        assert r["prompt"] == [{"role": "user", "content": f"{src['prompt']} {src['instruction']}"}]
        assert r["completion"] == [{"role": "assistant", "content": src["unbiased_answer"]}]
    held = pq.read_table(tmp_path / "s3/heldout/prompts.parquet")
    assert set(held["scale"].to_pylist()) == {"likelihood", "frequency"}
    assert json.loads((tmp_path / "s3/heldout/manifest.json").read_text())["setting"] == 3


def test_explained_style_never_repeats_the_descriptor(hb_prompts: Path, tmp_path: Path) -> None:
    write_sft(hb_prompts, 1, tmp_path / "s1", max_train=300, max_eval=10, style="explained")
    prompts = {
        r["prompt_id"]: r
        for r in pq.read_table(
            hb_prompts / "prompts.parquet", columns=["prompt_id", "descriptor", "unbiased_answer"]
        ).to_pylist()
    }
    sentences = set()
    for r in pq.read_table(tmp_path / "s1/train.parquet").to_pylist():
        src = prompts[r["prompt_id"]]
        answer, _, sentence = r["completion"][0]["content"].partition(". ")
        assert answer == src["unbiased_answer"]
        assert not re.search(rf"\b{re.escape(src['descriptor'])}\b", sentence, re.IGNORECASE)
        sentences.add(sentence)
    assert len(sentences) >= 8  # varied


def test_sft_is_deterministic_and_mixes_general_data(hb_prompts: Path, tmp_path: Path) -> None:
    general = tmp_path / "alpaca.json"
    general.write_text(
        json.dumps(
            [
                {"instruction": f"Name a colour number {i}.", "input": "", "output": f"Blue {i}."}
                for i in range(100)
            ]
        )
    )
    for name in ("a", "b"):
        info = write_sft(
            hb_prompts,
            6,
            tmp_path / name,
            max_train=30,
            max_eval=5,
            general=str(general),
            general_fraction=0.1,
        )
    assert info["general"]["rows"] == 10  # 10% of 90 + 10
    for file in ("train.parquet", "eval.parquet", "heldout/prompts.parquet", "manifest.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    sources = pq.read_table(tmp_path / "a/train.parquet")["source"].to_pylist()
    assert sources.count("general") == 10 and sources.count("scd") == 90


def test_unknown_names_in_a_settings_file_are_rejected(tmp_path: Path, hb_table) -> None:
    bad = tmp_path / "settings.yaml"
    bad.write_text("6:\n  train: {scenario: [education]}\n  eval: {scenario: [school]}\n")
    with pytest.raises(InputError, match=r"settings.yaml: setting 6.eval.scenario.*'school'"):
        load_settings(bad)
    bad.write_text("3:\n  train: {axis: [martian]}\n  eval: {axis: [age]}\n")
    with pytest.raises(InputError, match="'martian' is not an axis"):
        split_masks(hb_table, load_settings(bad)[3])
    bad.write_text("3:\n  train: {scale: [certainty]}\n  eval: {scale: [certainty]}\n")
    with pytest.raises(InputError, match="overlap"):
        load_settings(bad)
