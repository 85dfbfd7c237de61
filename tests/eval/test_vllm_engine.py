"""The vLLM engine on CPU, against a recording fake ``LLM`` that computes real log-probabilities
(tests/eval/fake_vllm.py): what it asks vLLM for, what it derives, and that its scores equal the
transformers engine's."""

from __future__ import annotations

import json
from pathlib import Path

import fake_vllm  # tests/eval/fake_vllm.py (pytest puts this directory on sys.path)
import pytest
from vllm_reference import reference_score  # tests/eval/vllm_reference.py

from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.engines import ChoiceRequest, SharedEngine, engine_spec, make_engine
from scd.eval.engines.hf import HFEngine
from scd.eval.engines.vllm import VLLMEngine
from scd.eval.engines.vllm_setup import lora_rank_for
from scd.models.formatting import load_tokenizer


@pytest.fixture
def fake(monkeypatch):
    return fake_vllm.install(monkeypatch)


@pytest.fixture(scope="module")
def adapters(toy_model: Path, tmp_path_factory) -> dict[str, Path]:
    """Two random (non-zero) LoRA adapters of the toy model: r=8, and r=8 with one module at 24."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("adapters")
    out = {}
    for name, pattern in (("a", {}), ("b", {"q_proj": 24})):
        torch.manual_seed(len(name) + len(pattern))
        base = AutoModelForCausalLM.from_pretrained(toy_model, dtype=torch.float32)
        config = LoraConfig(
            r=8,
            lora_alpha=16,
            target_modules="all-linear",
            rank_pattern=pattern,
            init_lora_weights=False,
            task_type="CAUSAL_LM",
        )
        get_peft_model(base, config).save_pretrained(root / name)
        out[name] = root / name
    return out


def _requests(toy_model: Path) -> list[ChoiceRequest]:
    """Prompts with single-token options, and multi-token options that share first tokens."""
    tok = load_tokenizer(str(toy_model))
    prompts = [tok.encode(t) for t in ("i am a christian", "we are neighbours", "how often")]
    single = [ChoiceRequest(tuple(p), ((5,), (7,))) for p in prompts]
    multi = [ChoiceRequest(tuple(p), ((5, 9), (5, 11, 3), (7,), (12, 9))) for p in prompts]
    return single + multi


CPU32 = engine_spec(device="cpu", dtype="float32")
VLLM = engine_spec("vllm")


def _close(a: list[list[float]], b: list[list[float]]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x == pytest.approx(y, abs=1e-4)


def test_scores_read_next_token_logprobs_not_prompt_logprobs(fake, toy_model: Path) -> None:
    tok = load_tokenizer(str(toy_model))
    reqs = _requests(toy_model)
    hf = HFEngine(str(toy_model), CPU32, tokenizer=tok)
    engine = make_engine(VLLM, str(toy_model), tokenizer=tok)
    got = engine.score(reqs)
    _close(got, hf.score(reqs))
    llm = fake.instances[-1]
    sent = llm.requests
    assert all(r.params.prompt_logprobs is None for r in sent)
    assert all(r.params.max_tokens == 1 and r.params.logprob_token_ids for r in sent)
    # one request per distinct prefix: each prompt, prompt+(5,), prompt+(5,11), prompt+(12,);
    # the first token 5, shared by two options, is asked for once
    assert len(sent) == 3 * 4
    by_prefix = {tuple(r.prompt_token_ids): r.params.logprob_token_ids for r in sent}
    p0 = reqs[3].prompt_ids
    assert sorted(by_prefix[p0]) == [5, 7, 12]
    assert by_prefix[(*p0, 5)] == [9, 11] and by_prefix[(*p0, 5, 11)] == [3]
    assert by_prefix[(*p0, 12)] == [9]
    # the reference path (prompt_logprobs) gives the same numbers
    _close(reference_score(engine, reqs), got)


def test_requests_share_the_prompt_prefix(fake, toy_model: Path) -> None:
    """Every request starts with its prompt, so vLLM computes a prompt once; prompt_logprobs
    requests skip the prefix cache and compute every prompt again, once per option."""
    tok = load_tokenizer(str(toy_model))
    reqs = [r for r in _requests(toy_model) if len(r.option_ids) > 2]
    engine = make_engine(VLLM, str(toy_model), tokenizer=tok)
    llm = fake.instances[-1]
    engine.score(reqs)
    fast = sum(r.computed_tokens for r in llm.requests)
    prompts = [tuple(r.prompt_ids) for r in reqs]
    starts = [any(tuple(r.prompt_token_ids[: len(p)]) == p for p in prompts) for r in llm.requests]
    assert all(starts)
    assert fast == sum(len(p) for p in prompts) + 3 * 3  # each prompt once + 3 option tokens
    llm.requests.clear()
    reference_score(engine, reqs)
    slow = sum(r.computed_tokens for r in llm.requests)
    assert slow == sum((len(r.prompt_ids) + len(o)) for r in reqs for o in r.option_ids)
    assert slow > 3 * fast


def test_max_model_len_and_lora_rank_are_derived(fake, toy_model: Path, adapters, tmp_path) -> None:
    tok = load_tokenizer(str(toy_model))
    make_engine(VLLM, str(toy_model), tokenizer=tok)
    kwargs = fake.instances[-1].kwargs
    assert kwargs["max_model_len"] == 256  # the toy model's context (vLLM refuses more)
    assert "enable_lora" not in kwargs
    make_engine(VLLM, str(toy_model), tokenizer=tok, adapters=[str(adapters["a"])])
    assert fake.instances[-1].kwargs["max_lora_rank"] == 8
    both = [str(adapters["a"]), str(adapters["b"])]
    make_engine(
        engine_spec("vllm", max_model_len=128), str(toy_model), tokenizer=tok, adapters=both
    )
    kwargs = fake.instances[-1].kwargs
    assert kwargs["enable_lora"] and kwargs["max_lora_rank"] == 32  # rank_pattern 24 -> 32
    assert kwargs["max_model_len"] == 128
    with pytest.raises(InputError, match="max-model-len 512: above the model's context length 256"):
        make_engine(engine_spec("vllm", max_model_len=512), str(toy_model), tokenizer=tok)
    big = tmp_path / "big"
    big.mkdir()
    (big / "adapter_config.json").write_text(json.dumps({"r": 600}))
    with pytest.raises(InputError, match="rank 600 is above vLLM's largest"):
        lora_rank_for([big])
    assert lora_rank_for([]) == 1


def test_long_context_models_are_capped(fake, toy_model: Path, tmp_path) -> None:
    import shutil

    long = tmp_path / "long"
    shutil.copytree(toy_model, long)
    config = json.loads((long / "config.json").read_text())
    (long / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 131072}))
    VLLMEngine(str(long), tokenizer=load_tokenizer(str(long)))
    assert fake.instances[-1].kwargs["max_model_len"] == 4096


def test_adapters_are_routed_per_request(fake, toy_model: Path, adapters) -> None:
    tok = load_tokenizer(str(toy_model))
    reqs = _requests(toy_model)
    shared = SharedEngine(VLLM, str(toy_model), adapters=[str(adapters["a"]), str(adapters["b"])])
    got = {}
    for name in ("a", None, "b", "a"):
        engine = shared.get(tok, str(adapters[name]) if name else None)
        got.setdefault(name, []).append(engine.score(reqs))
    assert shared.loads == 1 and len(fake.instances) == 1
    llm = fake.instances[0]
    routes = {(r.lora.lora_int_id, r.lora.lora_path) if r.lora else None for r in llm.requests}
    a, b = str(adapters["a"].resolve()), str(adapters["b"].resolve())
    assert routes == {(1, a), (2, b), None}
    _close(got["a"][0], got["a"][1])  # switching back gives the same scores
    for name in ("a", "b"):
        hf = HFEngine(str(toy_model), CPU32, tokenizer=tok)
        hf.use_adapter(str(adapters[name]))
        _close(got[name][0], hf.score(reqs))
    hf = HFEngine(str(toy_model), CPU32, tokenizer=tok)
    _close(got[None][0], hf.score(reqs))
    assert got["a"][0] != got["b"][0] != got[None][0]  # the adapters do change the scores


def test_hf_engine_switches_adapters_on_one_base(toy_model: Path, adapters) -> None:
    """hf: the base with adapter layers disabled equals a fresh base; each adapter equals an
    engine that loaded it alone."""
    tok = load_tokenizer(str(toy_model))
    reqs = _requests(toy_model)
    fresh = HFEngine(str(toy_model), CPU32, tokenizer=tok)
    base = fresh.score(reqs)
    engine = HFEngine(str(toy_model), CPU32, tokenizer=tok)
    seen = {}
    for name in ("a", "b", None, "a"):
        engine.use_adapter(str(adapters[name]) if name else None)
        seen[name] = engine.score(reqs)
    _close(seen[None], base)
    for name in ("a", "b"):
        alone = HFEngine(str(toy_model), CPU32, tokenizer=tok)
        alone.use_adapter(str(adapters[name]))
        _close(seen[name], alone.score(reqs))
    assert len(engine.adapters) == 1  # only the adapter in use stays loaded


def test_options_of_the_other_backend_are_refused(fake, toy_model: Path) -> None:
    tok = load_tokenizer(str(toy_model))
    with pytest.raises(
        InputError, match="--batch-size 8: an option of the hf backend, not of vllm"
    ):
        make_engine(engine_spec("vllm", batch_size=8), str(toy_model), tokenizer=tok)
    with pytest.raises(
        InputError, match="--tensor-parallel-size 2: an option of the vllm backend, not of hf"
    ):
        make_engine(engine_spec("hf", tensor_parallel_size=2), str(toy_model), tokenizer=tok)
    make_engine(
        engine_spec("hf", tensor_parallel_size=None, device="cpu"), str(toy_model), tokenizer=tok
    )


def test_evaluate_bias_on_vllm_equals_hf(
    fake, toy_model: Path, toy_prompts: Path, tmp_path
) -> None:
    hf = get("bias").evaluate(
        str(toy_model),
        tmp_path / "hf",
        prompts=toy_prompts,
        limit=60,
        engine=engine_spec(device="cpu"),
        progress=False,
    )
    vl = get("bias").evaluate(
        str(toy_model),
        tmp_path / "vllm",
        prompts=toy_prompts,
        limit=60,
        engine=VLLM,
        progress=False,
    )
    a = [json.loads(x) for x in (tmp_path / "hf/records.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "vllm/records.jsonl").read_text().splitlines()]
    assert [r["chosen"] for r in a] == [r["chosen"] for r in b]
    for x, y in zip(a, b):
        assert x["option_logprobs"] == pytest.approx(y["option_logprobs"], abs=1e-4)
    assert hf["overall"]["pct"] == vl["overall"]["pct"]
    assert all(r.params.prompt_logprobs is None for r in fake.instances[-1].requests)


def test_vllms_progress_bar_draws_nothing_and_moves_scds_line(monkeypatch, capsys):
    from scd.eval.engines import vllm

    moved = []
    monkeypatch.setattr(vllm, "tick", lambda done, total: moved.append((done, total)))
    bar_class = vllm._ticker()  # the tqdm class handed to LLM.generate(use_tqdm=...)
    assert bar_class is vllm._ticker()  # made once
    bar = bar_class(total=3, desc="Processed prompts")
    bar.update(1)
    bar.update(2)
    bar.close()
    assert moved == [(1, 3), (3, 3)]
    assert capsys.readouterr() == ("", "")  # vLLM's own bar is drawn nowhere
