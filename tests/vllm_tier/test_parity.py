"""scd's vLLM engine on real vLLM gives the transformers engine's answers: SmolLM2-135M-Instruct
in float32 on both, the same answer on every record and log-probabilities within
:data:`conftest.TOLERANCE` -- the base model, an adapter, a system prompt, multi-token options
(SmolLM2's tokenizer splits "Unlikely", "Rarely" and BBQ's answer texts), generate mode, and
adapters switched within one engine.

``prompt_logprobs`` (the vLLM-side reference of the fake-vLLM tests) crashes vLLM's CPU build
whenever LoRA is enabled -- even for base requests (its CPU LoRA wrapper sizes prompt-logprob
indices differently from the GPU one) -- so the reference here is transformers.
"""

from __future__ import annotations

import pytest
from conftest import TOLERANCE
from conftest import records as _records  # tests/vllm_tier/conftest.py
from conftest import same as _same

from scd.eval.benchmarks import get
from scd.eval.engines import engine_spec

HF = engine_spec(dtype="float32", device="cpu")
VLLM = engine_spec("vllm", dtype="float32", kv_cache_space=1.0)


@pytest.mark.parametrize(
    ("name", "options"),
    [("base", {}), ("system-prompt", {"system_prompt": "Answer as a fair-minded person."})],
)
def test_bias_scores_equal_transformers(smol, toy_prompts, tmp_path, name, options) -> None:
    import dataclasses

    for spec, out in ((HF, "hf"), (VLLM, "vllm")):
        get("bias").evaluate(
            smol,
            tmp_path / out,
            prompts=toy_prompts,
            limit=48,
            progress=False,
            engine=dataclasses.replace(spec, **options),
        )
    assert _same(tmp_path / "hf", tmp_path / "vllm") > 48  # descriptor prompts + baselines


def test_an_adapter_scores_equal_transformers(smol, smol_adapters, toy_prompts, tmp_path) -> None:
    for spec, out in ((HF, "hf"), (VLLM, "vllm")):
        get("bias").evaluate(
            smol,
            tmp_path / out,
            prompts=toy_prompts,
            limit=48,
            progress=False,
            engine=spec,
            adapter=smol_adapters["a"],
        )
    _same(tmp_path / "hf", tmp_path / "vllm")


def test_bbq_multi_token_answers_equal_transformers(smol, shared_data, tmp_path) -> None:
    for spec, out in ((HF, "hf"), (VLLM, "vllm")):
        get("bbq").evaluate(
            smol,
            tmp_path / out,
            data=shared_data / "bbq" / "data",
            limit=24,
            engine=spec,
            progress=False,
        )
    assert _same(tmp_path / "hf", tmp_path / "vllm", answer="pred") >= 20


def test_generate_mode_gives_the_same_text(smol, toy_prompts, tmp_path) -> None:
    for spec, out in ((HF, "hf"), (VLLM, "vllm")):
        get("bias").evaluate(
            smol,
            tmp_path / out,
            prompts=toy_prompts,
            limit=24,
            mode="generate",
            max_new_tokens=6,
            engine=spec,
            progress=False,
        )
    hf, vl = _records(tmp_path / "hf"), _records(tmp_path / "vllm")
    assert [r["generated"] for r in hf] == [r["generated"] for r in vl]
    assert any(r["generated"] for r in hf)


def test_adapters_switch_within_one_engine(smol, smol_adapters, toy_prompts) -> None:
    from scd.eval.benchmarks.bias.task import load_work
    from scd.eval.engines import ChoiceRequest, make_engine
    from scd.models.formatting import Formatter, load_tokenizer

    fmt = Formatter(load_tokenizer(smol))
    rows = load_work(toy_prompts, 12, 0)
    ids = fmt.encode([f"{r['prompt']} {r['instruction']}" for r in rows])
    reqs = [ChoiceRequest(tuple(p), fmt.option_ids(r["options"])) for p, r in zip(ids, rows)]
    a, b = smol_adapters["a"], smol_adapters["b"]
    hf = make_engine(HF, smol, tokenizer=fmt.tokenizer)
    expected = {}
    for adapter in (None, a, b):
        hf.use_adapter(adapter)
        expected[adapter] = hf.score(reqs)
    hf.close()
    engine = make_engine(VLLM, smol, tokenizer=fmt.tokenizer, adapters=[a, b])
    try:
        for adapter in (None, a, b, None, a):  # base -> a -> b -> base -> a
            engine.use_adapter(adapter)
            got = engine.score(reqs)
            for x, y in zip(got, expected[adapter], strict=True):
                assert x == pytest.approx(y, abs=TOLERANCE)
    finally:
        engine.close()
    assert expected[a] != expected[None] != expected[b]  # the adapters change the scores
