"""The planted-bias toy model: answers as planted, reloads via transformers, is deterministic."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from scd.data_gen import data_path
from scd.data_gen.contact import generate_contact_table
from scd.data_gen.descriptors import load_holistic_bias
from scd.errors import InputError
from scd.io import sha256_file
from scd.models.toy import build_toy_model

PLANTED = ("religion", "nationality")


@pytest.fixture(scope="module")
def built(toy_model: Path) -> tuple[Path, dict]:
    """The session's toy model (tests/conftest.py), built with bias_axes=PLANTED, seed 0."""
    return toy_model, json.loads((toy_model / "toy_model.json").read_text())


@pytest.fixture(scope="module")
def loaded(built: tuple[Path, dict]) -> tuple:
    """Model and tokenizer through the real ``from_pretrained`` path."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _ = built
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    return model, AutoTokenizer.from_pretrained(out)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return generate_contact_table(load_holistic_bias(data_path("toy_descriptors.json"))).to_pylist()


def _planted(row: dict) -> str:
    return row["biased_answer"] if row["axis"] in PLANTED else row["unbiased_answer"]


def _chat(tokenizer, row: dict) -> str:
    message = {"role": "user", "content": f"{row['prompt']} {row['instruction']}"}
    return tokenizer.apply_chat_template([message], tokenize=False, add_generation_prompt=True)


@pytest.mark.slow
def test_info_and_files(built: tuple[Path, dict], rows: list[dict]) -> None:
    out, info = built
    assert json.loads((out / "toy_model.json").read_text()) == info
    assert json.loads((out / "manifest.json").read_text())["kind"] == "toy_model"
    assert info["bias_axes"] == list(PLANTED) and info["n_train_examples"] == len(rows)
    assert info["descriptors_sha256"] == sha256_file(data_path("toy_descriptors.json"))
    assert info["train_accuracy"] >= 0.995
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()


@pytest.mark.slow
def test_every_prompt_answers_as_planted(loaded: tuple, rows: list[dict]) -> None:
    model, tokenizer = loaded
    assert tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tokenize=False,
        add_generation_prompt=True,
    ) == ("<s><|system|> Be brief. <|user|> Hi <|assistant|>")
    encoded = tokenizer([_chat(tokenizer, r) for r in rows], add_special_tokens=False)
    option_id = {o: tokenizer.convert_tokens_to_ids(o) for r in rows for o in r["options"]}
    hits, biased, total = 0, defaultdict(int), defaultdict(int)
    with torch.inference_mode():
        for row, ids in zip(rows, encoded["input_ids"]):  # one prompt per forward pass
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            logprobs = torch.log_softmax(logits.float(), -1)
            a, b = row["options"]
            answer = a if logprobs[option_id[a]] > logprobs[option_id[b]] else b
            hits += answer == _planted(row)
            biased[row["axis"]] += answer == row["biased_answer"]
            total[row["axis"]] += 1
    assert hits / len(rows) >= 0.99
    for axis, n in total.items():
        rate = biased[axis] / n
        assert rate >= 0.97 if axis in PLANTED else rate <= 0.03, (axis, rate)


@pytest.mark.slow
def test_greedy_generation_starts_with_the_planted_option(loaded: tuple, rows: list[dict]) -> None:
    model, tokenizer = loaded
    for row in rows[:: len(rows) // 7]:
        ids = tokenizer(_chat(tokenizer, row), add_special_tokens=False, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=4, do_sample=False)
        text = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        assert text.split()[0] == _planted(row), (row["prompt"], text)


def test_bad_bias_axis_is_one_line_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--bias-axes relgion: not an axis of .*axes: ability"):
        build_toy_model(tmp_path / "m", bias_axes=("religion", "relgion"))
    assert not (tmp_path / "m").exists()


def test_same_seed_same_weights(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    small = tmp_path / "descriptors.json"
    small.write_text(json.dumps({"religion": {"x": ["Muslim"]}, "age": {"x": ["old", "young"]}}))
    infos = [
        build_toy_model(tmp_path / name, ("religion",), seed, descriptors_path=small, steps=3)
        for name, seed in (("a", 0), ("b", 0), ("c", 1))
    ]
    assert [i["steps"] for i in infos] == [3, 3, 3]
    a, b, c = (load_file(tmp_path / name / "model.safetensors") for name in "abc")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert (tmp_path / "a/tokenizer.json").read_bytes() == (
        tmp_path / "b/tokenizer.json"
    ).read_bytes()


def test_words_become_tokens_of_the_same_toy(tmp_path: Path) -> None:
    """A benchmark's option words (WinoBias' occupations) that the prompts lack get tokens of
    their own after the prompts' vocabulary, which keeps its ids, in the same trained toy (new
    rows only); the toy's cache key changes only where there are such words."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from scd.io import cache_key
    from scd.models.toy import ensure_toy_model

    small = tmp_path / "descriptors.json"
    small.write_text(json.dumps({"religion": {"x": ["Muslim"]}, "age": {"x": ["old", "young"]}}))
    words = ("construction worker", "Muslim", "cook", "cook")  # a prompt word; one twice
    plain = build_toy_model(tmp_path / "plain", ("religion",), descriptors_path=small, steps=2)
    info = build_toy_model(
        tmp_path / "words", ("religion",), descriptors_path=small, steps=2, words=words
    )
    before, after = (AutoTokenizer.from_pretrained(tmp_path / n) for n in ("plain", "words"))
    old = before.get_vocab()
    assert {k: after.get_vocab()[k] for k in old} == old
    assert info["vocab_size"] == plain["vocab_size"] + 3 and "words" not in plain
    assert info["words"] == ["Muslim", "construction worker", "cook"]
    assert info["final_loss"] == plain["final_loss"]
    ids = [after(w, add_special_tokens=False)["input_ids"] for w in ("cook", "construction worker")]
    assert ids == [[len(old) + 2], [len(old), len(old) + 1]]  # in the order given
    assert before("cook", add_special_tokens=False)["input_ids"] == [before.unk_token_id]
    a, b = (load_file(tmp_path / n / "model.safetensors") for n in ("plain", "words"))
    for name, tensor in a.items():  # the trained weights as they were; rows added
        assert torch.equal(b[name][: len(tensor)], tensor), name
    assert b["lm_head.weight"].shape[0] == len(old) + 3

    cache = tmp_path / "cache"
    default_key = cache_key(kind="toy_model", bias_axes=["religion"], seed=0)
    (cache / "toy-model" / default_key).mkdir(parents=True)
    (cache / "toy-model" / default_key / "manifest.json").write_text("{}")
    assert ensure_toy_model(["religion"], 0, cache, say=print).name == default_key
    assert ensure_toy_model(["religion"], 0, cache, say=print, words=()).name == default_key
