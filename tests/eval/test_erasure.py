"""The erase arm: the concept's labels, the eraser the hf engine applies (as LEACE's own eraser by
hand, batched as alone, in the result's identity), the refusals, the search's choice, and the arm
in ``scd run`` on the planted-bias toy -- its bias erased, its baselines kept, on toys trained with
1 and 2 threads -- against an eraser fitted on shuffled groups, which leaves the bias."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from cli_run import run_scd  # tests/cli_run.py
from search_checks import assert_no_heldout_prompt  # tests/eval/search_checks.py

from scd.eval.benchmarks import get
from scd.eval.erasure import (
    BASELINE,
    UNKNOWN,
    fit_erasers,
    load_erasure,
    save_erasure,
    token_labels,
)
from scd.models import model_fingerprint


def _rows(toy_prompts: Path, n: int = 40) -> tuple[list[dict], list[dict]]:
    """``n`` toy descriptor prompts and the baselines of their templates, with user texts."""
    import pyarrow.parquet as pq

    from scd.data_gen.contact import user_text

    rows = pq.read_table(toy_prompts / "prompts.parquet").to_pylist()[::97][:n]
    base = pq.read_table(toy_prompts / "baseline.parquet").to_pylist()
    return [{**r, "user": user_text(r)} for r in rows], [{**b, "user": user_text(b)} for b in base]


def _fmt(toy_model: Path):
    from scd.models.formatting import Formatter, load_tokenizer

    return Formatter(load_tokenizer(str(toy_model)))


def test_a_token_is_labelled_with_the_group_named_so_far(toy_model, toy_prompts) -> None:
    rows, base = _rows(toy_prompts, 6)
    fmt = _fmt(toy_model)
    classes = [*sorted({r["axis"] for r in rows}), BASELINE]
    data = token_labels(rows, base, fmt.encode, "axis", classes)
    cells = {
        tuple(r[k] for k in ("principle", "scenario", "action", "scale", "contact")) for r in rows
    }
    assert len(data) == len(rows) + len(cells)  # each row, then one baseline per template cell
    for r, (ids, labels) in zip(rows, data):
        words = fmt.tokenizer.convert_ids_to_tokens(ids)
        first = labels.index(classes.index(r["axis"]))
        assert set(labels[:first]) == {UNKNOWN} and set(labels[first:]) == {
            classes.index(r["axis"])
        }
        assert words[first] == r["descriptor"].split()[0].split("-")[0], (words, r["descriptor"])
    for _, labels in data[len(rows) :]:
        assert set(labels) == {UNKNOWN, len(classes) - 1} and labels[-1] == len(classes) - 1
    with pytest.raises(Exception, match="no descriptor-free baseline"):
        token_labels(rows, [], fmt.encode, "axis", classes)


def _eraser(toy_model: Path, toy_prompts: Path, out: Path, layers: list[int]) -> Path:
    from transformers import AutoModelForCausalLM

    rows, base = _rows(toy_prompts)
    classes = [*sorted({r["axis"] for r in rows}), BASELINE]
    data = token_labels(rows, base, _fmt(toy_model).encode, "axis", classes)
    model = AutoModelForCausalLM.from_pretrained(toy_model).eval()
    erasers = fit_erasers(model, data, layers, len(classes), batch_size=7)
    return save_erasure(out, erasers, model_fingerprint(str(toy_model)), classes=classes)


def _hf(**values):
    from scd.eval.engines import engine_spec

    return engine_spec("hf", **values)


def test_the_engine_erases_as_leaces_own_eraser_by_hand(toy_model, toy_prompts, tmp_path) -> None:
    """The hf engine with an eraser of layer 0 scores (batched, through the prefix cache) as a
    forward pass by hand whose embeddings go through concept-erasure's own LeaceEraser; the
    eraser changes the scores; one fitted with layer 1 after it (sequentially) erases both."""
    from concept_erasure import LeaceEraser
    from transformers import AutoModelForCausalLM

    from scd.eval.engines import ChoiceRequest
    from scd.eval.engines.hf import HFEngine

    erased = _eraser(toy_model, toy_prompts, tmp_path / "e", [0])
    info = json.loads((erased / "erase.json").read_text())
    assert info["layers"] == [0] and info["kind"] == "concept_eraser"
    fmt = _fmt(toy_model)
    rows, _ = _rows(toy_prompts, 10)
    yes, no = fmt.option_ids(("Yes", "No"))
    requests = [ChoiceRequest(tuple(fmt.encode([r["user"]])[0]), (yes, no + yes)) for r in rows]
    spec = _hf(erase=str(erased), batch_size=4, prefix_cache=True)
    engine = HFEngine(str(toy_model), spec, tokenizer=fmt.tokenizer)
    batched = [x for row in engine.score(requests) for x in row]
    assert batched == pytest.approx([x for r in requests for x in engine.score([r])[0]], abs=1e-5)
    engine.use_erasure(None)
    plain = [x for row in engine.score(requests) for x in row]
    assert max(abs(a - b) for a, b in zip(plain, batched)) > 1e-2
    left, right, bias = load_erasure(erased).erasers[0]
    eraser = LeaceEraser(left.double(), right.double(), bias.double())
    model = AutoModelForCausalLM.from_pretrained(toy_model).eval()
    by_hand = []
    with torch.inference_mode():
        for r in requests:
            for option in r.option_ids:
                ids = torch.tensor([list(r.prompt_ids) + list(option)])
                embeds = eraser(model.model.embed_tokens(ids).double()).float()
                logp = model(inputs_embeds=embeds).logits[0].log_softmax(-1)
                n = len(r.prompt_ids)
                by_hand.append(sum(float(logp[n - 1 + j, t]) for j, t in enumerate(option)))
    assert batched == pytest.approx(by_hand, abs=1e-4)
    both = load_erasure(_eraser(toy_model, toy_prompts, tmp_path / "both", [0, 1]))
    assert both.layers == (0, 1) and both.digest() != load_erasure(erased).digest()


def test_an_eraser_of_no_layer_gives_the_base_records_and_enters_the_identity(
    toy_model, toy_prompts, tmp_path
) -> None:
    bias = get("bias")
    bias.evaluate(str(toy_model), tmp_path / "base", prompts=toy_prompts, limit=40, progress=False)
    none = save_erasure(tmp_path / "none", {}, model_fingerprint(str(toy_model)))
    out = tmp_path / "erased"
    bias.evaluate(
        str(toy_model),
        out,
        prompts=toy_prompts,
        limit=40,
        progress=False,
        engine=_hf(erase=str(none)),
    )
    assert (tmp_path / "base/records.jsonl").read_bytes() == (out / "records.jsonl").read_bytes()
    assert json.loads((out / "run.json").read_text())["erase"] == load_erasure(none).digest()
    assert json.loads((tmp_path / "base/run.json").read_text())["erase"] is None


def test_an_eraser_that_does_not_fit_or_another_engine_is_one_line(
    toy_model, toy_prompts, tmp_path
) -> None:
    good = _eraser(toy_model, toy_prompts, tmp_path / "good", [1])
    other = _eraser(toy_model, toy_prompts, tmp_path / "other", [1])
    info = json.loads((other / "erase.json").read_text())
    (other / "erase.json").write_text(json.dumps({**info, "model_fingerprint": "another"}))
    deep = _eraser(toy_model, toy_prompts, tmp_path / "deep", [1])
    (deep / "erasers.safetensors").rename(deep / "x")
    from safetensors.torch import load_file, save_file

    tensors = {k.replace("1.", "5.", 1): v for k, v in load_file(str(deep / "x")).items()}
    save_file(tensors, str(deep / "erasers.safetensors"))
    (deep / "erase.json").write_text(json.dumps({**info, "layers": [5]}))
    base = [
        "eval",
        "bias",
        "--model",
        str(toy_model),
        "--prompts",
        str(toy_prompts),
        "--limit",
        "20",
    ]
    for erase, says in (
        (other, "an eraser of another model"),
        (deep, "erasers of layers [5] and width [64]: the model has 2 layers"),
        (tmp_path, "not an eraser directory"),
    ):
        out = tmp_path / f"out-{erase.name}"
        code, _, err = run_scd(*base, "--erase", str(erase), "--out", str(out))
        assert code == 2 and says in err and err.count("\n") == 1, err
        assert not out.exists()
    for backend in ("vllm", "openai"):
        for flag, value in (("--erase", good), ("--steer", good)):
            out = tmp_path / backend
            code, _, err = run_scd(*base, "--backend", backend, flag, str(value), "--out", str(out))
            assert code == 2 and err.count("\n") == 1, err
            assert flag in err and "hf" in err and backend in err, err
            assert not out.exists()


def test_a_recipe_that_erases_on_another_engine_is_refused_before_any_work(tmp_path) -> None:
    recipe = tmp_path / "recipe.yaml"
    for section, says in (
        ("eval: {backend: vllm}", "the erase arm erases in the hf engine; eval.backend is vllm"),
        ("capability: {lm_eval_tasks: [hellaswag]}", "cannot apply the erase arm's eraser"),
        ("arena: {erase_layers: [0, []]}", "each a layer or a non-empty list of layers"),
        ("arena: {erase_concept: group}", "erase_concept"),
    ):
        recipe.write_text(
            f"model: toy\ndata: {{descriptors: toy}}\narms: [base, erase]\n{section}\n"
            "wandb: {enabled: false}\n"
        )
        out = tmp_path / "out"
        code, _, err = run_scd("run", str(recipe), "--outputs", str(out))
        assert code == 2 and says in err and err.count("\n") == 1, err
        assert not out.exists()


def test_the_search_keeps_the_lowest_bias_then_the_highest_margin_then_kl():
    from scd.eval.erasure_search import _choose

    def point(layers: list[int], bias: float, margin: float, kl: float) -> dict:
        return {"layers": layers, "bias_pct": bias, "margin": margin, "kl": kl, "n": 60}

    base = point([], 30.0, 1.0, 0.0)
    grid = [base, point([0], 10.0, 2.0, 0.3), point([4], 5.0, 3.0, 0.9), point([8], 30.0, 5.0, 0.1)]
    best, why = _choose(grid, max_kl=0.5)
    assert best["layers"] == [0] and why.startswith("layer 0 kept: the lowest validation bias")
    assert _choose(grid, max_kl=None)[0]["layers"] == [4]
    assert _choose([base, point([3], 40.0, 9.0, 0.1)], 0.5)[0]["layers"] == []  # none kept
    tied = [base, point([2], 10.0, 2.0, 0.2), point([1], 10.0, 2.5, 0.4)]  # the higher margin
    assert _choose(tied, 0.5)[0]["layers"] == [1]
    tied = [base, point([0, 2], 10.0, 2.0, 0.1), point([3], 10.0, 2.0, 0.1)]  # then fewer layers
    assert _choose(tied, 0.5)[0]["layers"] == [3]


RECIPE = {
    "model": "toy",
    "toy_model": {"bias_axes": ["religion", "nationality"], "seed": 0},
    "arms": ["base", "erase"],
    # the toy's neutral prompts are mostly <unk> to its word-level vocabulary: its KL says
    # little of what an eraser costs (tests/eval/test_steer_toy.py)
    "arena": {"erase_max_kl": None},
    "data": {"descriptors": "toy", "setting": 1, "max_train": 200, "max_eval": 20},
    "eval": {"batch_size": 64, "bias": {"enabled": True}},
    "capability": {"batch_size": 16},
    "wandb": {"enabled": False},
}


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_the_erase_arm_erases_the_toys_bias_and_keeps_its_baselines(threads, tmp_path, monkeypatch):
    """``scd run`` with ``arms: [base, erase]`` on the planted-bias toy, built (and run) with 1
    and with 2 torch threads: held-out bias falls below half the base's (the arm's interval
    under half the base's lower bound), the descriptor-free baselines' interval overlaps the
    base's, the search read no held-out prompt; and (1 thread) a search killed after its first
    point resumes to the same choice, and an eraser fitted the same way on the training rows'
    groups shuffled leaves the bias where it was. (The two toys are the same
    bytes on a 2-core x86_64 CPU: the 2-layer toy's operations are too small to split.)"""
    recipe = tmp_path / "erase.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    monkeypatch.setenv("SCD_THREADS", str(threads))  # where scd chooses torch's threads itself
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # the toy is built (and scored) by this run
    try:
        code, _, err = run_scd("run", str(recipe), "--outputs", str(tmp_path), "--run-id", "r")
    finally:
        torch.set_num_threads(before)
    assert code == 0, err[-3000:]
    run = tmp_path / "r"
    rows = {r["arm"]: r for r in json.loads((run / "tables/arena.json").read_text())}
    base, erase = rows["base"], rows["erase"]
    assert base["bias_ci_low"] > 15  # the planted bias: religion and nationality, 2 of 8 axes
    assert erase["bias_ci_high"] < base["bias_ci_low"] / 2, (base, erase)
    assert erase["bias_p_holm"] < 0.01
    # the baselines within their intervals: the two 95% intervals overlap (measured: 0.19%
    # [0.03, 1.04] -> 1.48% [0.75, 2.90] of 540: the arm's rate is not inside the base's own
    # interval -- 7 more of 540 baselines biased, where the eraser moves every prompt's margin)
    assert erase["baseline_ci_low"] <= base["baseline_ci_high"], (base, erase)
    assert base["baseline_ci_low"] <= erase["baseline_ci_high"], (base, erase)
    assert erase["baseline_pct"] < 5, (base, erase)
    info = json.loads((run / "setting-1/arm-erase/eraser/erase.json").read_text())
    assert info["layers"] and info["concept"] == "axis" and info["classes"][-1] == BASELINE
    assert info["tokens"]["religion"] > 0 and info["model_fingerprint"]
    assert "lowest validation bias" in info["why"] and info["validation"]["bias_pct"] < 10
    assert_no_heldout_prompt(info["validation_prompts"], run / "setting-1/sft")
    report = (run / "report.md").read_text()
    assert "## Erasure" in report and "| 1 | none |" in report
    if threads == 1:
        _resumes_to_the_same_choice(recipe, tmp_path, info, erase)
        _shuffled_leaves_the_bias(run, info)


def _resumes_to_the_same_choice(recipe: Path, outputs: Path, info: dict, row: dict) -> None:
    """Killed after the search's first point, its directory not written: run again, the search
    measures only the points not in its curve and keeps the same layers, the arm the same row."""
    import shutil

    run = outputs / "r"
    curve = run / "setting-1/arm-erase/eraser.search/curve.jsonl"
    curve.write_text(curve.read_text().splitlines()[0] + "\n")
    shutil.rmtree(run / "setting-1/arm-erase/eraser")
    shutil.rmtree(run / "setting-1/arm-erase/eval")
    state = json.loads((run / "state.json").read_text())
    for stage in list(state["stages"]):
        if stage.startswith("setting-1/arm-erase/e") or stage == "report":
            del state["stages"][stage]
    (run / "state.json").write_text(json.dumps(state))
    code, out, err = run_scd("run", str(recipe), "--outputs", str(outputs), "--run-id", "r")
    assert code == 0 and "setting-1/arm-erase/eraser: done" in out + err, err[-3000:]
    again = json.loads((run / "setting-1/arm-erase/eraser/erase.json").read_text())
    assert (again["layers"], again["curve"]) == (info["layers"], info["curve"])
    assert len(curve.read_text().splitlines()) == len(info["curve"])  # no point measured twice
    rows = {r["arm"]: r for r in json.loads((run / "tables/arena.json").read_text())}
    assert rows["erase"] == row


def _shuffled_leaves_the_bias(run: Path, info: dict) -> None:
    """The arm's eraser and one fitted the same way on shuffled groups (the search's own
    pieces), each applied to 600 held-out prompts beside the base model."""
    from transformers import AutoModelForCausalLM

    from scd.eval.erasure_search import _baselines, _concept_rows
    from scd.eval.search_points import train_rows
    from scd.models.formatting import Formatter, load_tokenizer

    layout = json.loads((run / "layout.json").read_text())
    model, sft = layout["model"], run / "setting-1/sft"
    train = _concept_rows(train_rows(sft, [Path(layout["prompts"])]), "axis", 7)
    fmt = Formatter(load_tokenizer(model))
    data = token_labels(
        train, _baselines(sft, [Path(layout["prompts"])]), fmt.encode, "axis", info["classes"]
    )
    lm = AutoModelForCausalLM.from_pretrained(model).eval()
    shuffled = fit_erasers(lm, data, info["layers"], len(info["classes"]))
    out = save_erasure(run.parent / "shuffled", shuffled, info["model_fingerprint"])
    rates = {}
    for name, erase in (
        ("base", None),
        ("arm", run / "setting-1/arm-erase/eraser"),
        ("shuffled", out),
    ):
        where = run.parent / f"heldout-{name}"
        get("bias").evaluate(
            model,
            where,
            prompts=sft / "heldout",
            limit=600,
            progress=False,
            engine=_hf(erase=None if erase is None else str(erase), batch_size=64),
        )
        rates[name] = json.loads((where / "summary.json").read_text())["overall"]
    assert rates["arm"]["ci_high"] < rates["base"]["ci_low"] / 2, rates
    assert rates["shuffled"]["pct"] > rates["base"]["pct"] / 2, rates
    assert rates["shuffled"]["ci_high"] >= rates["base"]["ci_low"], rates
