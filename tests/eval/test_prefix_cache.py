"""The hf engine's prefix cache across prompts: the head a batch's prompts share is computed
once, and every path gives the numbers it gives without the cache (choices, log-probabilities
within 1e-5, generated text), on the toy model and on SmolLM2 under every protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

import scd.eval.engines.hf as hf
import scd.eval.engines.hf_forward as hf_forward
from scd.cli import main
from scd.eval.benchmarks.bias.task import load_work
from scd.eval.engines import ChoiceRequest, engine_spec
from scd.eval.engines.hf import HFEngine
from scd.models.formatting import Formatter, load_tokenizer
from scd.models.protocols import PAPER_SYSTEM_PROMPT, PROTOCOLS


def _heads_seen(engine: HFEngine, rests: list[int] | None = None) -> list[int]:
    """The length of every head the engine computes once, per batch (and in ``rests`` the
    fewest tokens a prompt of the batch runs after it)."""
    heads: list[int] = []
    original = engine._after_head

    def record(seqs, head, side=None):
        heads.append(len(head))
        if rests is not None:
            rests.append(min(map(len, seqs)))
        return original(seqs, head, side)

    engine._after_head = record
    return heads


def _same(got: list[list[float]], expected: list[list[float]]) -> None:
    """The same choices; log-probabilities within 1e-5, absolute or relative (float32: on
    SmolLM2 a batch of 12 against one prompt at a time, no cache, differ by up to 1.9e-5)."""
    assert [s.index(max(s)) for s in got] == [s.index(max(s)) for s in expected]
    for a, b in zip(got, expected):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5)


def _requests(fmt: Formatter, prompts: Path, limit: int) -> list[ChoiceRequest]:
    work = load_work(prompts, limit, seed=3)
    ids = fmt.encode([f"{w['prompt']} {w['instruction']}" for w in work])
    return [ChoiceRequest(tuple(i), fmt.option_ids(w["options"])) for i, w in zip(ids, work)]


@pytest.mark.parametrize("side", ["left", "right"])
def test_every_path_gives_the_numbers_of_whole_prompts(
    toy_model: Path, toy_prompts: Path, side: str
) -> None:
    """A system prompt (the prompt arm's) gives every prompt a long shared head; single-token
    options, two-token options and generation, batched, with the cache and without."""
    tokenizer = load_tokenizer(str(toy_model))
    fmt = Formatter(tokenizer, system_prompt=PAPER_SYSTEM_PROMPT)
    single = _requests(fmt, toy_prompts, 64)
    multi = [ChoiceRequest(r.prompt_ids, tuple(o + o for o in r.option_ids)) for r in single]
    prompts = [list(r.prompt_ids) for r in single[:16]]
    results = {}
    for cached in (False, True):
        spec = engine_spec(device="cpu", batch_size=16, prefix_cache=cached)
        engine = HFEngine(str(toy_model), spec, tokenizer=tokenizer, padding_side=side)
        heads = _heads_seen(engine)
        results[cached] = (
            engine.score(single),
            engine.score(multi[:32]),
            engine.generate(prompts, 6),
        )
        assert (min(heads) >= hf.MIN_SHARED_HEAD) if cached else (set(heads) == {0}), heads
    for got, expected in zip(results[True][:2], results[False][:2]):
        _same(got, expected)
    assert results[True][2] == results[False][2]


def test_a_head_is_taken_only_where_every_prompt_has_it(
    toy_model: Path, toy_prompts: Path, monkeypatch
) -> None:
    """With the threshold at one token the toy's own short chat-template heads are cached too:
    batches whose prompts diverge early, prompts one token longer than the head, an adapter-free
    base; the same numbers as without the cache."""
    monkeypatch.setattr(hf_forward, "MIN_SHARED_HEAD", 1)
    # token-id order, whatever length order would leave (batching.batch_order weighs the two)
    by_ids = lambda prompts, size, minimum: sorted(range(len(prompts)), key=lambda i: prompts[i])  # noqa: E731
    monkeypatch.setattr(hf_forward, "batch_order", by_ids)
    tokenizer = load_tokenizer(str(toy_model))
    requests = _requests(Formatter(tokenizer), toy_prompts, 60)
    reference = HFEngine(
        str(toy_model), engine_spec(device="cpu", prefix_cache=False), tokenizer=tokenizer
    )
    spec = engine_spec(device="cpu", batch_size=7, prefix_cache=True)
    engine = HFEngine(str(toy_model), spec, tokenizer=tokenizer)
    rests: list[int] = []
    heads = _heads_seen(engine, rests)
    _same(engine.score(requests), reference.score(requests))
    assert len(set(heads) - {0}) > 1  # heads of several lengths were cached (0: a lone prompt)
    for r in requests[:4]:  # a prompt and itself but its last token: one token after the head
        pair = [r, ChoiceRequest(r.prompt_ids[:-1], r.option_ids)]
        _same(engine.score(pair), reference.score(pair))
        assert (heads[-1], rests[-1]) == (len(r.prompt_ids) - 2, 1)


@pytest.mark.parametrize("side", ["left", "right"])
def test_options_of_mixed_lengths_score_as_whole_sequences(
    toy_model: Path, toy_prompts: Path, side
):
    """One request's options of one, two and three tokens: the first token read from the
    prompt's own pass, the others from the option rows (a one-token option feeds nothing),
    give each prompt + option's summed log-probabilities as one sequence does."""
    tokenizer = load_tokenizer(str(toy_model))
    fmt = Formatter(tokenizer, system_prompt=PAPER_SYSTEM_PROMPT)
    single = _requests(fmt, toy_prompts, 24)
    mixed = [
        ChoiceRequest(r.prompt_ids, (a, a + b, b + a + b))
        for r in single
        for a, b in [r.option_ids[:2]]
    ]
    spec = engine_spec(device="cpu", batch_size=8)
    engine = HFEngine(str(toy_model), spec, tokenizer=tokenizer, padding_side=side)
    with engine._active_model():
        reference = [engine._score_full([r])[0] for r in mixed]
    _same(engine.score(mixed), reference)


@pytest.mark.slow
def test_smollm2_under_every_protocol(smollm2, hb_prompts: Path) -> None:
    """SmolLM2-135M-Instruct: each protocol's prompts and options (its chat template's system
    text, the paper's Llama 2 text), batched with the cache and without. (One prompt at a time
    no head is shared: that path is the one without the cache; test_real_templates checks the
    batched paths against one-sequence forwards.)"""
    rows = load_work(hb_prompts, 12, seed=0)
    fmt = Formatter(load_tokenizer(str(smollm2.model)))
    engines = {
        cached: HFEngine(
            str(smollm2.model), engine_spec(device="cpu", batch_size=12, prefix_cache=cached)
        )
        for cached in (False, True)
    }
    heads = _heads_seen(engines[True])
    for name, protocol in PROTOCOLS.items():
        ids = protocol.prompt_ids(fmt, rows)
        requests = [
            ChoiceRequest(tuple(i), protocol.option_ids(fmt, r["options"]))
            for i, r in zip(ids, rows)
        ]
        _same(engines[True].score(requests), engines[False].score(requests))
        assert heads[-1] >= hf.MIN_SHARED_HEAD, name  # the cache was used
    assert max(heads) > 100  # the paper's system prompt


def test_the_switch_is_a_flag_that_pins_nothing(toy_model: Path, toy_prompts: Path, tmp_path):
    """``--no-prefix-cache`` is a speed option: a run started with the cache is resumed without
    it into the same directory (a result computed either way is the same result)."""
    out = tmp_path / "run"
    argv = ["eval", "bias", "--model", str(toy_model), "--prompts", str(toy_prompts)]
    assert main([*argv, "--limit", "30", "--out", str(out)]) == 0
    first = (out / "records.jsonl").read_text()
    assert main([*argv, "--limit", "30", "--out", str(out), "--no-prefix-cache"]) == 0
    assert (out / "records.jsonl").read_text() == first


def test_the_cache_is_on_unless_asked_off(toy_model: Path) -> None:
    """On by default, the toy model included (batching.batch_order keeps length order where
    token-id order would not pay: BENCHMARKS.md); off when asked."""
    tokenizer = load_tokenizer(str(toy_model))
    for asked, on in ((None, True), (True, True), (False, False)):
        spec = engine_spec(device="cpu", prefix_cache=asked)
        assert HFEngine(str(toy_model), spec, tokenizer=tokenizer).prefix_cache is on
