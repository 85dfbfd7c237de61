"""Activation steering: the vectors, the hf engine adding them (batched as one at a time), the
KL they cost, the refusals, and the steer arm of the arena on the planted-bias toy model --
vector, layer and scale chosen on validation prompts, resumed to the same choice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from cli_run import run_scd  # tests/cli_run.py
from search_checks import assert_no_heldout_prompt  # tests/eval/search_checks.py

from scd.eval.benchmarks import get
from scd.eval.steering import load_steering, save_steering
from scd.models import model_fingerprint

REPO = Path(__file__).resolve().parents[2]


def _steer_dir(
    model: Path,
    out: Path,
    layer: int | list[int],
    scale: float,
    seed: int = 0,
    positions: str = "all",
) -> Path:
    """A steering directory for ``model`` with random vectors (the test of the mechanics),
    added at ``positions``."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model)
    torch.manual_seed(seed)
    vectors = torch.randn(config.num_hidden_layers, config.hidden_size)
    return save_steering(out, vectors, layer, scale, model_fingerprint(str(model)), positions)


def test_scale_0_gives_the_base_models_records_exactly(toy_model, toy_prompts, tmp_path):
    bias = get("bias")
    bias.evaluate(str(toy_model), tmp_path / "base", prompts=toy_prompts, limit=60, progress=False)
    zero = _steer_dir(toy_model, tmp_path / "zero", layer=1, scale=0.0)
    bias.evaluate(
        str(toy_model),
        tmp_path / "zero-run",
        prompts=toy_prompts,
        limit=60,
        progress=False,
        engine=_hf(steer=str(zero)),
    )
    base, steered = ((tmp_path / d / "records.jsonl").read_bytes() for d in ("base", "zero-run"))
    assert base == steered
    run = json.loads((tmp_path / "zero-run" / "run.json").read_text())
    assert run["steer"] == load_steering(zero).digest()  # in the identity, by its content
    assert json.loads((tmp_path / "base" / "run.json").read_text())["steer"] is None


def _hf(**values):
    from scd.eval.engines import engine_spec

    return engine_spec("hf", **values)


def test_the_steered_engine_scores_in_batches_as_one_at_a_time(toy_model, tmp_path) -> None:
    from scd.eval.engines import ChoiceRequest
    from scd.eval.engines.hf import HFEngine
    from scd.models.formatting import load_tokenizer

    steer = _steer_dir(toy_model, tmp_path / "s", layer=0, scale=0.3)
    engine = HFEngine(
        str(toy_model),
        _hf(steer=str(steer), batch_size=8),
        tokenizer=load_tokenizer(str(toy_model)),
    )
    torch.manual_seed(1)
    requests = [
        ChoiceRequest(tuple(torch.randint(8, 90, (n,)).tolist()), ((5,), (6, 7)))
        for n in (3, 9, 14, 6, 11, 4, 20, 8, 5, 13)
    ]
    together = [x for row in engine.score(requests) for x in row]
    alone = [x for r in requests for x in engine.score([r])[0]]
    assert together == pytest.approx(alone, abs=1e-5)
    engine.use_steering(None)
    plain = [x for row in engine.score(requests) for x in row]
    assert max(abs(a - b) for a, b in zip(plain, together)) > 1e-2  # the vector did something


def test_layers_steered_together_each_add_their_own_vector(toy_model, tmp_path) -> None:
    """A steering directory of layers 0 and 1 adds each layer's vector (times the scale) to its
    own layer: the engine's scores equal a forward pass with the two hooks by hand, and differ
    from either layer's alone; steer.json lists the layers, and the identity tells them apart."""
    from transformers import AutoModelForCausalLM

    from scd.eval.engines import ChoiceRequest
    from scd.eval.engines.hf import HFEngine
    from scd.eval.steering import steered
    from scd.models.formatting import load_tokenizer

    both = _steer_dir(toy_model, tmp_path / "both", layer=[1, 0], scale=0.4)
    info = json.loads((both / "steer.json").read_text())
    steering = load_steering(both)
    assert info["layer"] == [1, 0] and steering.layers == (1, 0)
    torch.manual_seed(2)
    requests = [
        ChoiceRequest(tuple(torch.randint(8, 90, (n,)).tolist()), ((5,), (6,))) for n in (4, 9, 6)
    ]

    def scores(steer: Path | None) -> list[float]:
        spec = _hf(steer=None if steer is None else str(steer), batch_size=4)
        engine = HFEngine(str(toy_model), spec, tokenizer=load_tokenizer(str(toy_model)))
        return [x for row in engine.score(requests) for x in row]

    model = AutoModelForCausalLM.from_pretrained(toy_model).eval()
    by_hand = []
    with torch.inference_mode(), steered(model, steering.added()):
        for r in requests:
            logp = model(input_ids=torch.tensor([r.prompt_ids])).logits[0, -1].log_softmax(-1)
            by_hand += [float(logp[o[0]]) for o in r.option_ids]
    assert scores(both) == pytest.approx(by_hand, abs=1e-5)
    for layer in (0, 1):
        alone = _steer_dir(toy_model, tmp_path / f"l{layer}", layer=layer, scale=0.4)
        assert max(abs(a - b) for a, b in zip(scores(alone), by_hand)) > 1e-3
        assert load_steering(alone).digest() != steering.digest()


def test_each_unbiased_answer_weighs_the_same_in_the_vector(toy_model) -> None:
    """Pairs grouped by their unbiased answer: a group's size does not tilt the vector, and the
    same prompts with the answers' roles swapped (what "Yes" vs "No" alone contributes) give 0."""
    from transformers import AutoModelForCausalLM

    from scd.eval.steering import balanced_differences, residual_differences

    model = AutoModelForCausalLM.from_pretrained(toy_model).eval()
    heads = [[5, 9, 12, 7], [5, 11, 3], [8, 9, 14, 2, 6]]
    yes = [(h + [20], h + [21]) for h in heads]  # "Yes" unbiased
    no = [(h + [21], h + [20]) for h in heads]  # the same prompts, "No" unbiased
    swapped = balanced_differences(model, [yes, no], batch_size=2)
    assert swapped.abs().max() < 1e-5
    one = balanced_differences(model, [yes[:1], no[1:]], batch_size=2)
    tilted = balanced_differences(model, [yes[:1] * 4, no[1:]], batch_size=2)
    assert torch.allclose(one, tilted, atol=1e-5)
    plain = residual_differences(model, yes[:1] * 4 + no[1:], batch_size=2)
    assert (plain - tilted).abs().max() > 1e-3  # the plain mean is tilted by the 4 copies


def test_kl_grows_with_the_scale_of_either_sign(toy_model, tmp_path) -> None:
    from scd.eval.capability import kl_from_base

    kls = {}
    for scale in (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0):
        steer = _steer_dir(toy_model, tmp_path / f"s{scale}", layer=1, scale=scale)
        out = kl_from_base(str(toy_model), tmp_path / f"kl{scale}", steer=str(steer), batch_size=16)
        kls[scale] = out["kl_mean"]
    assert kls[0.0] == 0.0 and kls[0.5] < kls[1.0] < kls[2.0]
    assert 0.0 < kls[-0.5] < kls[-1.0] < kls[-2.0]
    assert kls[-1.0] != kls[1.0]  # subtracting is not adding


def test_a_plain_text_benchmark_says_a_vector_added_from_the_answer_leaves_it_unsteered(
    toy_model, tmp_path, capsys
) -> None:
    """CrowS-Pairs scores plain sentences: a vector added from the assistant's turn on finds no
    turn there, changes no record, and the evaluation says so in one line; one added at every
    position changes the records, and nothing is said."""
    data = tmp_path / "crows"
    data.mkdir()
    rows = ["i,sent_more,sent_less,stereo_antistereo,bias_type"]
    rows += [f"{i},Should I trust them {i} ?,Should I help them {i} ?,stereo,age" for i in range(4)]
    (data / "crows_pairs_anonymized.csv").write_text("\n".join(rows) + "\n")
    crows = get("crows_pairs")
    crows.evaluate(str(toy_model), tmp_path / "base", data=str(data), progress=False)
    records = {}
    for positions in ("answer", "all"):
        steer = _steer_dir(toy_model, tmp_path / positions, 1, 4.0, positions=positions)
        capsys.readouterr()
        out = tmp_path / f"run-{positions}"
        spec = _hf(steer=str(steer))
        crows.evaluate(str(toy_model), out, data=str(data), progress=False, engine=spec)
        said = [line for line in capsys.readouterr().err.splitlines() if "not steered" in line]
        records[positions] = (out / "records.jsonl").read_bytes()
        if positions == "answer":
            assert len(said) == 1 and said[0].startswith("crows_pairs: not steered -- ")
            assert str(steer) in said[0] and "positions: answer" in said[0]
        else:
            assert said == []
    assert records["answer"] == (tmp_path / "base" / "records.jsonl").read_bytes()
    assert records["all"] != records["answer"]


def _steer_arena(toy_model: Path, outputs: Path, run_id: str, *sets: str) -> list[str]:
    """``scd run`` of the arena quickstart with the base and steer arms (no SDS probe) into
    ``outputs``, whose cache already holds the toy model; ``sets``: more ``--set`` values."""
    from scd.io import cache_key

    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, outputs / "cache" / "toy-model" / key)
    recipe = str(REPO / "recipes" / "arena-quickstart.yaml")
    args = ["run", recipe, "--outputs", str(outputs), "--run-id", run_id]
    for value in ("arms=[base, steer]", "eval.sds.enabled=false", *sets):
        args += ["--set", value]
    return args


def test_a_steering_vector_that_does_not_fit_is_one_line(toy_model, toy_prompts, tmp_path):
    other = _steer_dir(toy_model, tmp_path / "other", layer=1, scale=1.0)
    info = json.loads((other / "steer.json").read_text())
    (other / "steer.json").write_text(json.dumps({**info, "model_fingerprint": "another"}))
    deep = _steer_dir(toy_model, tmp_path / "deep", layer=1, scale=1.0)
    info = json.loads((deep / "steer.json").read_text())
    (deep / "steer.json").write_text(json.dumps({**info, "layer": 7}))
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
    for steer, says in (
        (other, "a steering vector of another model"),
        (deep, "layer 7 of vectors"),
        (tmp_path, "not a steering directory"),
    ):
        out = tmp_path / f"out-{steer.name}"
        code, _, err = run_scd(*base, "--steer", str(steer), "--out", str(out))
        assert code == 2 and says in err and err.count("\n") == 1, err
        assert not out.exists()
    for backend in ("vllm", "openai"):
        out = tmp_path / backend
        code, _, err = run_scd(*base, "--backend", backend, "--steer", str(deep), "--out", str(out))
        assert code == 2 and err.count("\n") == 1, err
        assert "--steer" in err and "hf" in err and backend in err, err
        assert not out.exists()


@pytest.mark.slow
def test_the_steer_arm_keeps_its_best_validation_point_and_resumes_its_choice(toy_model, tmp_path):
    """The steer arm of the arena quickstart on the planted-bias toy model, on setting 3 (the
    vector from certainty prompts, measured on likelihood and frequency prompts; a grid of layer
    0, layer 1 and both together): the layer and scale kept are the grid point of the highest
    mean validation margin within the KL bound, on validation prompts none of which is a
    held-out prompt, the steer row has
    every column the base row has, the transfer table by arm holds it on each held-out scale, and
    a search killed after two grid points resumes to the same choice and the same arena row.

    Not asserted: that the vector lowers the toy's bias. It does not: the toy's planted bias is
    an XOR of the template's action and the descriptor's axis, computed in its last layer, and no
    single added vector undoes it (measured: the answer-token vector and the last-prompt-token
    difference of biased and unbiased prompts, layers 0-1, scales 0.5-128, leave held-out bias at
    22% or raise it; a 4-layer, 128-wide toy the same). A toy with a planted steering
    direction is steered: tests/eval/test_steer_toy.py."""
    args = _steer_arena(
        toy_model,
        tmp_path,
        "steer",
        "data.setting=3",
        "eval.bias.limit=1500",
        "arena.steer_layers=[0, 1, [0, 1]]",
        "arena.steer_scales=[-2, -0.5, 0.5, 2]",
    )
    code, _, err = run_scd(*args)
    assert code == 0, err[-3000:]
    run = tmp_path / "steer"
    rows = {r["arm"]: r for r in json.loads((run / "tables" / "arena.json").read_text())}
    # every column the base row has (and the verdict, which the base row has not: #75)
    assert set(rows["steer"]) - {"debiased"} == set(rows["base"])
    assert rows["steer"]["kl_mean"] is not None
    info = json.loads((run / "setting-3/arm-steer/vector/steer.json").read_text())
    within = [p for p in info["curve"] if p["kl"] <= info["max_kl"]]
    assert [p["layer"] for p in info["curve"]] == [0] + [0] * 4 + [1] * 4 + [[0, 1]] * 4
    assert "highest mean validation margin" in info["why"] and info["positions"] == "answer"
    assert info["validation"]["margin"] == max(p["margin"] for p in within)
    assert all(
        len(p["margins"]) == p["n"] == len(info["validation_prompts"]) for p in info["curve"]
    )
    assert_no_heldout_prompt(info["validation_prompts"], run / "setting-3/sft")
    # each grid point's KL is the steered model's from the unsteered base, as kl_from_base
    # measures a steering directory of that layer and scale (not from the model steered twice)
    from scd.eval.capability import kl_from_base

    vectors = load_steering(run / "setting-3/arm-steer/vector").vectors
    point = next(p for p in info["curve"] if p["layer"] == [0, 1] and p["scale"] == 2)
    steer = save_steering(
        tmp_path / "point",
        vectors,
        point["layer"],
        point["scale"],
        info["model_fingerprint"],
        info["positions"],
    )
    model = next((tmp_path / "cache" / "toy-model").iterdir())  # the run's copy of the toy
    alone = kl_from_base(str(model), tmp_path / "point-kl", steer=str(steer), batch_size=8)
    assert point["scale"] > 0 and alone["kl_mean"] > 0
    assert point["kl"] == pytest.approx(alone["kl_mean"], rel=1e-4, abs=1e-6)
    report = (run / "report.md").read_text()
    assert "## Steering" in report and "![steering-3](figures/steering-3.png)" in report
    assert (run / "figures" / "steering-3.png").stat().st_size > 0
    assert "| 3 | 0+1 | 2 |" in report  # the grid's table: layers 0 and 1 together, scale 2
    transfer = pd.read_csv(run / "tables" / "table11_arms.csv")  # the vector's transfer
    assert set(transfer["value"]) == {"likelihood", "frequency"}
    assert transfer.groupby("value")["arm"].apply(list).to_dict() == {
        "frequency": ["base", "steer"],
        "likelihood": ["base", "steer"],
    }
    # every held-out prompt the arena's steer row counts, split by its scale
    steer_n = transfer[transfer["arm"] == "steer"]["bias_n"]
    assert (steer_n > 0).all() and steer_n.sum() == rows["steer"]["bias_n"]
    assert "## Table 11 by arm: cross-scale transfer" in report
    # killed after two grid points: the curve holds them, the vector directory is not there
    curve = run / "setting-3/arm-steer/vector.search/curve.jsonl"
    kept = curve.read_text().splitlines()[:2]
    curve.write_text("\n".join(kept) + "\n")
    shutil.rmtree(run / "setting-3/arm-steer/vector")
    state = json.loads((run / "state.json").read_text())
    for stage in list(state["stages"]):
        if stage.startswith("setting-3/arm-steer") or stage in ("report",):
            del state["stages"][stage]
    (run / "state.json").write_text(json.dumps(state))
    shutil.rmtree(run / "setting-3/arm-steer/eval")
    code, _, err = run_scd(*args)
    assert code == 0, err[-3000:]
    again = json.loads((run / "setting-3/arm-steer/vector/steer.json").read_text())
    assert (again["layer"], again["scale"], again["curve"]) == (
        info["layer"],
        info["scale"],
        info["curve"],
    )
    rows_again = {r["arm"]: r for r in json.loads((run / "tables" / "arena.json").read_text())}
    assert rows_again["steer"] == rows["steer"]
    # the directory without its vectors (a copy of the results that left weights behind): the
    # stage is not finished; searched again, every grid point read back from the curve
    vector, n_points = run / "setting-3/arm-steer/vector", len(curve.read_text().splitlines())
    (vector / "vectors.safetensors").unlink()
    code, out, err = run_scd(*args)
    assert code == 0, err[-3000:]
    assert "setting-3/arm-steer/vector: done" in out + err  # the stage ran again
    assert len(curve.read_text().splitlines()) == n_points  # measuring no point twice
    assert torch.equal(load_steering(vector).vectors, vectors)
    assert json.loads((vector / "steer.json").read_text())["curve"] == info["curve"]
    # killed after the directory was written, before the state recorded the stage: the search
    # run again replaces its own directory (a directory of something else it refuses)
    state = json.loads((run / "state.json").read_text())
    del state["stages"]["setting-3/arm-steer/vector"]
    (run / "state.json").write_text(json.dumps(state))
    code, out, err = run_scd(*args)
    assert code == 0 and "setting-3/arm-steer/vector: done" in out + err, err[-3000:]
    assert json.loads((vector / "steer.json").read_text())["curve"] == info["curve"]
    rows_again = {r["arm"]: r for r in json.loads((run / "tables" / "arena.json").read_text())}
    assert rows_again["steer"] == rows["steer"]


def test_a_steer_layer_outside_the_model_is_one_line_before_any_activation(toy_model, tmp_path):
    """``arena.steer_layers`` names a layer the toy (2 layers) does not have: refused when the
    search opens the model, before the vectors are computed (nothing of the search written)."""
    args = _steer_arena(
        toy_model, tmp_path, "deep", "eval.bias.limit=40", "arena.steer_layers=[0, [1, 2]]"
    )
    code, _, err = run_scd(*args)
    last = err.strip().splitlines()[-1]
    assert code == 2 and "layer 2: the model has 2 (0 to 1)" in last and "steer_layers" in last, err
    assert not list((tmp_path / "deep").rglob("vector*")), "the search wrote before refusing"


def test_a_recipe_that_steers_on_another_engine_is_refused_before_any_work(tmp_path) -> None:
    recipe = tmp_path / "recipe.yaml"
    for section, says in (
        ("eval: {backend: vllm}", "eval.backend is vllm"),
        ("capability: {lm_eval_tasks: [hellaswag]}", "lm-evaluation-harness cannot add"),
        ("arena: {steer_scales: [-1, .nan]}", "expected a list of finite scales (either sign)"),
        ("arena: {steer_scales: []}", "expected a list of finite scales (either sign)"),
        ("arena: {steer_layers: [0, []]}", "each a layer or a non-empty list of layers"),
        ("arena: {steer_layers: [0, [1, x]]}", "steer_layers: expected an integer, got 'x'"),
    ):
        recipe.write_text(
            f"model: toy\ndata: {{descriptors: toy}}\narms: [base, steer]\n{section}\n"
            "wandb: {enabled: false}\n"
        )
        out = tmp_path / "out"
        code, _, err = run_scd("run", str(recipe), "--outputs", str(out))
        assert code == 2 and says in err and err.count("\n") == 1, err
        assert not out.exists()


def test_the_search_keeps_the_highest_margin_then_kl_then_the_smallest_scale_of_either_sign():
    from scd.eval.steering_search import _choose

    def point(layer: int | list[int], scale: float, margin: float, kl: float) -> dict:
        return {
            "layer": layer,
            "scale": scale,
            "margin": margin,
            "bias_pct": 20.0,
            "kl": kl,
            "n": 30,
        }

    base = point(0, 0.0, 1.0, 0.0)
    # a negative scale that raises the margin is kept; one past the KL bound is not
    grid = [base, point(3, 2.0, 0.5, 0.1), point(3, -2.0, 2.0, 0.2), point(5, -8.0, 3.0, 0.9)]
    best, why = _choose(grid, max_kl=0.5)
    assert (best["layer"], best["scale"]) == (3, -2.0) and "2.0000 nats over 30 prompts" in why
    assert _choose(grid, max_kl=None)[0]["scale"] == -8.0
    # a point that moves the margin the wrong way is not kept over the base model
    assert _choose([base, point(3, 1.0, 0.9, 0.01)], max_kl=0.5)[0]["scale"] == 0.0
    # ties in margin and KL: the smaller scale in size, then the positive one, then the lower layer
    tied = [base, point(3, -1.0, 2.0, 0.1), point(3, 1.0, 2.0, 0.1), point(1, 1.0, 2.0, 0.1)]
    assert (_choose(tied, 0.5)[0]["layer"], _choose(tied, 0.5)[0]["scale"]) == (1, 1.0)
    tied.append(point(4, -0.5, 2.0, 0.1))
    assert _choose(tied, 0.5)[0]["scale"] == -0.5
    # then fewer layers steered together, then the lower ones
    together = [base, point([0, 1], 1.0, 2.0, 0.1), point(1, 1.0, 2.0, 0.1)]
    assert _choose(together, 0.5)[0]["layer"] == 1
    together = [base, point([1, 3], 1.0, 2.0, 0.1), point([0, 4], 1.0, 2.0, 0.1)]
    assert _choose(together, 0.5)[0]["layer"] == [0, 4]
