"""The vLLM engine itself on real vLLM: its next-token scores equal vLLM's own ``prompt_logprobs``
reference (and move scd's progress line as vLLM finishes requests), the planted-bias toy model
(head size 32) answers as on transformers, and a start that cannot work is one line naming the
options to change."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import TOLERANCE  # tests/vllm/conftest.py

from scd.eval.benchmarks import get
from scd.eval.engines import ChoiceRequest, engine_spec, make_engine
from scd.models.formatting import load_tokenizer
from scd.progress import Progress

sys.path.insert(0, str(Path(__file__).parents[1] / "eval"))
from vllm_reference import reference_score  # noqa: E402  tests/eval/vllm_reference.py

VLLM = engine_spec("vllm", dtype="float32", kv_cache_space=0.5)


def test_next_token_scores_equal_the_prompt_logprobs_reference(toy_model, vllm_device) -> None:
    """Single-token options and multi-token ones sharing first tokens (chained prefix requests).
    No adapter on a CPU: there ``prompt_logprobs`` crashes vLLM once LoRA is enabled."""
    tok = load_tokenizer(str(toy_model))
    prompts = [tok.encode(t) for t in ("i am a christian", "we are neighbours", "how often")]
    reqs = [ChoiceRequest(tuple(p), ((5,), (7,))) for p in prompts]
    reqs += [ChoiceRequest(tuple(p), ((5, 9), (5, 11, 3), (7,), (12, 9))) for p in prompts]
    engine = make_engine(VLLM, str(toy_model), tokenizer=tok)
    line = Progress("vllm", len(reqs), enabled=False)
    try:
        with line.part(len(reqs)):
            got = engine.score(reqs)
            moved = line.done  # vLLM's finished requests moved the line before the part ended
        want = reference_score(engine, reqs)
    finally:
        engine.close()
    for x, y in zip(got, want, strict=True):
        assert x == pytest.approx(y, abs=TOLERANCE)
    assert moved == len(reqs)


def test_the_toy_model_answers_as_on_transformers(toy_model, toy_prompts, tmp_path, vllm_device):
    kw = {"prompts": toy_prompts, "limit": 300, "progress": False}
    hf = get("bias").evaluate(
        str(toy_model), tmp_path / "hf", **kw, engine=engine_spec(device="cpu", dtype="float32")
    )
    vl = get("bias").evaluate(str(toy_model), tmp_path / "vllm", **kw, engine=VLLM)
    a, b = (
        [json.loads(x) for x in (tmp_path / d / "records.jsonl").read_text().splitlines()]
        for d in ("hf", "vllm")
    )
    assert [r["chosen"] for r in a] == [r["chosen"] for r in b]
    assert hf["overall"] == vl["overall"] and hf["overall"]["pct"] > 10  # the planted bias


def test_a_start_that_cannot_work_is_one_line(
    toy_model, tiny_model_builder, real_tokenizers, vllm_device, tmp_path, capsys
) -> None:
    from scd.cli import main

    prompts = tmp_path / "p"
    assert main(["generate", "contact", "--descriptors", "toy", "--out", str(prompts)]) == 0
    argv = [
        "eval",
        "bias",
        "--model",
        str(toy_model),
        "--prompts",
        str(prompts),
        "--limit",
        "3",
        "--backend",
        "vllm",
        "--max-model-len",
        "128",
    ]
    capsys.readouterr()
    assert main([*argv, "--kv-cache-space", "100000", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM did not start" in err[0] and "--kv-cache-space" in err[0], err
    assert not (tmp_path / "o").exists()
    if vllm_device == "cpu":  # a head size vLLM's CPU attention does not serve: refused at once
        small = tiny_model_builder(real_tokenizers / "llama-3.1-instruct", tmp_path / "tiny")
        capsys.readouterr()  # the model's own save progress
        assert (
            main(
                [
                    "eval",
                    "bias",
                    "--model",
                    str(small),
                    "--prompts",
                    str(prompts),
                    "--limit",
                    "3",
                    "--backend",
                    "vllm",
                    "--out",
                    str(tmp_path / "t"),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "attention heads of size 8" in err[0], err
