"""`scd eval bias` on the planted-bias toy model: ground truth, reference agreement, padding."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from scd.eval.benchmarks import get
from scd.eval.benchmarks.bias.task import load_work, stratified_sets
from scd.eval.engines import ChoiceRequest, engine_spec
from scd.eval.engines.hf import HFEngine
from scd.models.formatting import Formatter, load_tokenizer


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def full_eval(toy_model: Path, toy_prompts: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "full"
    spec = engine_spec(batch_size=64)
    get("bias").evaluate(str(toy_model), out, prompts=toy_prompts, engine=spec, progress=False)
    return out


def test_recovers_the_planted_bias(full_eval: Path, toy_prompts: Path, planted_axes) -> None:
    axes = pq.read_table(toy_prompts / "prompts.parquet", columns=["axis"])["axis"].to_pylist()
    planted_rate = 100 * sum(a in planted_axes for a in axes) / len(axes)
    summary = json.loads((full_eval / "summary.json").read_text())
    assert summary["overall"]["n"] == len(axes)
    assert abs(summary["overall"]["pct"] - planted_rate) <= 3
    by_axis = {axis: cell["pct"] for axis, cell in summary["by_axis"].items()}
    assert set(by_axis) == set(axes)
    for axis, pct in by_axis.items():
        assert (pct >= 97) if axis in planted_axes else (pct <= 3), (axis, pct)
    records = _records(full_eval)
    assert len(records) == len({r["prompt_id"] for r in records}) == len(axes) + 540
    assert sum(r["baseline"] for r in records) == 540  # descriptor-free baseline prompts
    assert (full_eval / "tables.md").read_text().strip()


def _naive_option_logprob(model, fmt: Formatter, user: str, option_ids: tuple[int, ...]) -> float:
    """One prompt at a time, no batching, no padding: the option's summed log-probability."""
    prompt_ids = fmt.encode([user])[0]
    ids = torch.tensor([prompt_ids + list(option_ids)])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    start = len(prompt_ids)
    return sum(logprobs[start - 1 + j, t].item() for j, t in enumerate(option_ids))


def test_choice_mode_agrees_with_naive_reference(
    full_eval: Path, toy_model: Path, toy_prompts: Path
) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(toy_model).eval()
    fmt = Formatter(load_tokenizer(str(toy_model)))
    work = {w["prompt_id"]: w for w in load_work(toy_prompts, None, 0)}
    records = _records(full_eval)
    sample = records[:: max(1, len(records) // 300)]
    for r in sample:
        row = work[r["prompt_id"]]
        user = f"{row['prompt']} {row['instruction']}"
        naive = [
            _naive_option_logprob(model, fmt, user, ids) for ids in fmt.option_ids(row["options"])
        ]
        assert r["options"][naive.index(max(naive))] == r["chosen"], r["prompt_id"]
        assert naive == pytest.approx(r["option_logprobs"], abs=1e-4)


def _requests(tokenizer, prompts: Path, limit: int, seed: int) -> tuple[list, list]:
    """Choice requests of ~``limit`` prompts, and the same with two-token options."""
    fmt = Formatter(tokenizer)
    work = load_work(prompts, limit, seed=seed)
    ids = fmt.encode([f"{w['prompt']} {w['instruction']}" for w in work])
    requests = [ChoiceRequest(tuple(i), fmt.option_ids(w["options"])) for i, w in zip(ids, work)]
    multi = [ChoiceRequest(r.prompt_ids, tuple(o + o for o in r.option_ids)) for r in requests]
    return requests, multi


def test_padding_side_and_batch_size_change_no_answer(toy_model: Path, toy_prompts: Path) -> None:
    tokenizer = load_tokenizer(str(toy_model))
    requests, multi = _requests(tokenizer, toy_prompts, 200, seed=3)
    results = []
    for side in ("left", "right"):
        for batch in (1, 7, 64):
            spec = engine_spec(device="cpu", batch_size=batch)
            engine = HFEngine(str(toy_model), spec, tokenizer=tokenizer, padding_side=side)
            results.append((engine.score(requests), engine.score(multi[:40])))
    ref_single, ref_multi = results[0]
    for single, multi_scores in results[1:]:
        assert [s.index(max(s)) for s in single] == [s.index(max(s)) for s in ref_single]
        for a, b in zip(single + multi_scores, ref_single + ref_multi):
            assert a == pytest.approx(b, abs=1e-4)


def test_a_batch_out_of_gpu_memory_is_scored_in_halves(
    toy_model: Path, toy_prompts: Path, capsys
) -> None:
    """A batch too large for the GPU's memory is split, not fatal; the numbers stay the same.
    (A fault no CPU shows: the model raises CUDA's out-of-memory error above 8 rows.)"""
    tokenizer = load_tokenizer(str(toy_model))
    requests, multi = _requests(tokenizer, toy_prompts, 100, seed=5)
    spec = engine_spec(device="cpu", batch_size=64)
    reference = HFEngine(str(toy_model), spec, tokenizer=tokenizer)
    expected = reference.score(requests), reference.score(multi)
    engine = HFEngine(str(toy_model), spec, tokenizer=tokenizer)
    forward, rows_seen = engine.model.forward, []

    def small_memory(*args, input_ids, **kwargs):
        rows_seen.append(len(input_ids))
        if len(input_ids) > 8:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(*args, input_ids=input_ids, **kwargs)

    engine.model.forward = small_memory
    got = [engine.score(requests)]
    assert engine.batch_size == 8
    assert rows_seen.count(64) == 1  # tried once, then smaller batches
    assert capsys.readouterr().err.count("out of memory at a batch of") == 3  # 64, 32, 16
    got.append(engine.score(multi))  # two options per prompt: 8 prompts feed 16 rows
    assert engine.batch_size == 4
    for a, b in zip(got[0] + got[1], expected[0] + expected[1]):
        assert a == pytest.approx(b, abs=1e-5)


def test_generate_mode_parses_the_same_answers(toy_model: Path, toy_prompts: Path, tmp_path):
    get("bias").evaluate(
        str(toy_model),
        tmp_path / "gen",
        prompts=toy_prompts,
        mode="generate",
        limit=150,
        seed=1,
        progress=False,
    )
    get("bias").evaluate(
        str(toy_model), tmp_path / "cho", prompts=toy_prompts, limit=150, seed=1, progress=False
    )
    gen, cho = _records(tmp_path / "gen"), _records(tmp_path / "cho")
    assert [r["prompt_id"] for r in gen] == [r["prompt_id"] for r in cho]
    assert all(r["generated"] is not None and r["option_logprobs"] is None for r in gen)
    agree = sum(g["chosen"] == c["chosen"] for g, c in zip(gen, cho))
    assert agree / len(gen) >= 0.98
    summary = json.loads((tmp_path / "gen/summary.json").read_text())
    assert summary["denominator"] == "all" and "unparsed" in summary["overall"]


def test_limit_is_a_seeded_stratified_subset_of_whole_sets(toy_prompts: Path) -> None:
    table = pq.read_table(toy_prompts / "prompts.parquet")
    a = stratified_sets(table, 900, seed=5)
    assert a == stratified_sets(table, 900, seed=5) != stratified_sets(table, 900, seed=6)
    assert abs(len(a) * 3 - 900) <= 3
    work = [w for w in load_work(toy_prompts, 900, seed=5) if not w["baseline"]]
    assert {w["set_id"] for w in work} == a and len(work) == 3 * len(a)
    scales = {w["scale"] for w in work}
    axes = {w["axis"] for w in work}
    assert scales == {"certainty", "likelihood", "frequency"} and len(axes) == 8
