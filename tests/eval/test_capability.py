"""Capability retention of an arm: KL from the base on neutral prompts, and lm-eval scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scd.errors import InputError
from scd.eval.capability import kl_from_base, lm_eval_scores, load_neutral_prompts

ITEMS = [
    ("n1", "arithmetic", "What is two plus two?", "Two plus two is four."),
    ("n2", "spelling", "Spell the word cat backwards.", "The word cat backwards is tac."),
    ("n3", "geography", "Name a large ocean.", "The Pacific is a large ocean."),
    ("n4", "cooking", "How do I boil an egg?", "Put the egg in boiling water for nine minutes."),
    ("n5", "science", "Why is the sky blue?", "Air scatters blue light more than red light."),
    ("n6", "language", "Give a synonym of happy.", "A synonym of happy is glad."),
]
SYSTEM = "You are a helpful assistant who answers briefly."


def _write_prompts(path: Path, items=ITEMS) -> Path:
    data = {
        "source": "test set",
        "items": [dict(zip(("id", "topic", "instruction", "response"), it)) for it in items],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_prompts(tmp_path_factory.mktemp("neutral") / "neutral.yaml")


@pytest.fixture(scope="module")
def adapter(toy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter on the toy model whose B matrices are random (non-zero): it changes the
    model's outputs, as a trained adapter does."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(toy_model, dtype=torch.float32)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
        init_lora_weights=False,
    )
    out = tmp_path_factory.mktemp("adapter") / "lora"
    get_peft_model(base, config).save_pretrained(out, safe_serialization=True)
    assert (out / "adapter_model.safetensors").is_file()
    return out


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def _reference_kl(model_dir: Path, adapter_dir: Path | None, system: str | None) -> list[float]:
    """Each prompt's mean KL computed the plain way: two separate models (the base, and the base
    with the adapter merged), one sequence at a time, the chat template applied directly."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    arm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        arm = PeftModel.from_pretrained(arm, adapter_dir).merge_and_unload()
    arm.eval()

    def ids(msgs, gen):
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        return tok(text, add_special_tokens=False)["input_ids"]

    def logprobs(model, prompt, reply_ids):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + reply_ids])).logits[0].float()
        n = len(reply_ids)
        return torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + n], -1)

    kls = []
    for _, _, user, reply in ITEMS:
        user_msgs = [{"role": "user", "content": user}]
        full = ids([*user_msgs, {"role": "assistant", "content": reply}], False)
        base_prompt = ids(user_msgs, True)
        reply_ids = full[len(base_prompt) :]
        sys_msgs = [{"role": "system", "content": system}] if system else []
        arm_prompt = ids(sys_msgs + user_msgs, True)
        p, q = logprobs(arm, arm_prompt, reply_ids), logprobs(base, base_prompt, reply_ids)
        kls.append((p.exp() * (p - q)).sum(-1).mean().item())
    return kls


def test_the_base_arm_is_exactly_zero(toy_model, prompts, tmp_path):
    out = tmp_path / "base"
    summary = kl_from_base(str(toy_model), out, prompts=prompts, batch_size=4)
    records = _records(out)
    assert [r["id"] for r in records] == [it[0] for it in ITEMS]
    assert all(r["kl"] == 0.0 and r["logp_arm"] == r["logp_base"] < 0 for r in records)
    assert summary["kl_mean"] == 0.0 and summary["logp_delta"] == 0.0
    assert (summary["kl_ci_low"], summary["kl_ci_high"]) == (0.0, 0.0)
    assert summary["kind"] == "capability_kl" and summary["n_prompts"] == len(ITEMS)
    assert summary["source"] == "test set" and summary["adapter"] is None
    assert summary["n_tokens"] == sum(r["n_tokens"] for r in records) > len(ITEMS)
    assert json.loads((out / "summary.json").read_text()) == summary


def test_an_adapter_drifts_and_matches_a_plain_computation(toy_model, adapter, prompts, tmp_path):
    out = tmp_path / "lora"
    summary = kl_from_base(str(toy_model), out, adapter=str(adapter), prompts=prompts)
    records = _records(out)
    assert all(r["kl"] >= 0 for r in records) and summary["kl_mean"] > 0.01
    assert summary["kl_ci_low"] <= summary["kl_mean"] <= summary["kl_ci_high"]
    assert summary["kl_ci_low"] < summary["kl_ci_high"]
    assert summary["logp_delta"] == pytest.approx(summary["logp_arm"] - summary["logp_base"])
    assert summary["logp_delta"] != 0
    # the reply positions: "Two plus two is four ." (6 words, <unk> or not) + the end-of-turn </s>
    assert records[0]["n_tokens"] == 6 + 1
    want = _reference_kl(toy_model, adapter, None)
    assert [r["kl"] for r in records] == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_a_system_prompt_drifts(toy_model, prompts, tmp_path):
    summary = kl_from_base(str(toy_model), tmp_path / "sys", system_prompt=SYSTEM, prompts=prompts)
    assert summary["kl_mean"] > 0 and summary["system_prompt"] == SYSTEM
    assert all(r["kl"] >= 0 for r in _records(tmp_path / "sys"))
    want = _reference_kl(toy_model, None, SYSTEM)
    assert [r["kl"] for r in _records(tmp_path / "sys")] == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_results_do_not_depend_on_the_batch_size(toy_model, adapter, prompts, tmp_path):
    got = {}
    for bs in (1, 4):
        kl_from_base(
            str(toy_model),
            tmp_path / f"bs{bs}",
            adapter=str(adapter),
            system_prompt=SYSTEM,
            prompts=prompts,
            batch_size=bs,
        )
        got[bs] = _records(tmp_path / f"bs{bs}")
    for a, b in zip(got[1], got[4]):
        assert a["id"] == b["id"] and a["n_tokens"] == b["n_tokens"]
        for key in ("kl", "logp_arm", "logp_base"):
            assert a[key] == pytest.approx(b[key], abs=1e-5)


def test_a_finished_stage_is_returned_without_loading_the_model(
    toy_model, prompts, tmp_path, monkeypatch
):
    out = tmp_path / "resume"
    first = kl_from_base(str(toy_model), out, system_prompt=SYSTEM, prompts=prompts)

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    import scd.eval.engines.hf_setup as hf_setup
    import scd.models.formatting as formatting

    monkeypatch.setattr(hf_setup, "load_model", refuse)
    monkeypatch.setattr(formatting, "load_tokenizer", refuse)
    again = kl_from_base(str(toy_model), out, system_prompt=SYSTEM, prompts=prompts, batch_size=2)
    assert again == first
    with pytest.raises(InputError, match="another configuration.*system_prompt"):
        kl_from_base(str(toy_model), out, system_prompt="Other.", prompts=prompts)
    with pytest.raises(AssertionError, match="the model was loaded"):  # a new out does load it
        kl_from_base(str(toy_model), tmp_path / "new", system_prompt=SYSTEM, prompts=prompts)


@pytest.mark.parametrize(
    "edit, key",
    [
        (None, "cannot read"),
        ({"source": "x", "items": []}, "items"),
        ({"items": [{"id": "a"}]}, "source"),
        (
            {"source": "x", "items": [{"id": "a", "topic": "t", "instruction": "i"}]},
            r"items\[0\]\.response",
        ),
        (
            {
                "source": "x",
                "items": [
                    dict(zip(("id", "topic", "instruction", "response"), it))
                    for it in (ITEMS[0], ITEMS[0])
                ],
            },
            r"items\[1\]\.id",
        ),
        ("- just\n- a list\n", "top level"),
    ],
)
def test_a_bad_prompt_set_is_refused_and_nothing_is_written(toy_model, tmp_path, edit, key):
    path = tmp_path / "bad.yaml"
    if isinstance(edit, dict):
        path.write_text(yaml.safe_dump(edit))
    elif isinstance(edit, str):
        path.write_text(edit)
    out = tmp_path / "out"
    with pytest.raises(InputError, match=key) as err:
        kl_from_base(str(toy_model), out, prompts=path)
    assert str(path) in str(err.value)
    assert not out.exists()


def test_the_packaged_prompt_set_loads_and_runs(toy_model, adapter, tmp_path):
    source, items = load_neutral_prompts()
    assert source and len(items) >= 10 and len({it["id"] for it in items}) == len(items)
    summary = kl_from_base(str(toy_model), tmp_path / "packaged", adapter=str(adapter))
    assert summary["n_prompts"] == len(items) and summary["kl_mean"] > 0
    assert summary["prompts"].endswith("neutral_prompts.yaml")


def test_kl_in_memory_reads_the_base_side_from_its_cache(toy_model, tmp_path):
    """The steering search measures many points of one base: with ``base_cache`` the base's
    pass runs on the first call only, and every call gives the numbers it gives without it."""
    import torch
    from transformers import AutoModelForCausalLM

    from scd.eval.capability import kl_in_memory
    from scd.eval.steering import Steering
    from scd.models.formatting import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(toy_model, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(str(toy_model))
    _, items = load_neutral_prompts()
    torch.manual_seed(0)
    steer = Steering(tmp_path, torch.randn(2, model.config.hidden_size), 1, 0.5, "toy", {})
    passes: list[int] = []
    model.register_forward_pre_hook(lambda *_: passes.append(1))

    def measured(**cache):
        passes.clear()
        return kl_in_memory(model, tokenizer, items, arm=steer, **cache), len(passes)

    (plain, n), cache = measured(), {}
    first, n_first = measured(base_cache=cache)
    again, n_again = measured(base_cache=cache)
    assert plain["kl"] > 0 and first == plain and again == plain
    assert len(cache) == len(items) and n_first == n and n_again == n // 2


# ---- lm-evaluation-harness

DOCS = [
    ("Is fire hot?", ["Yes", "No"], 0),
    ("Is ice hot?", ["Yes", "No"], 1),
    ("Is the sun cold?", ["Yes", "No"], 1),
    ("Is water wet?", ["Yes", "No"], 0),
    ("Can fish swim?", ["Yes", "No"], 0),
    ("Can a rock fly?", ["Yes", "No"], 1),
    ("Is snow white?", ["Yes", "No"], 0),
    ("Is coal white?", ["Yes", "No"], 1),
]
TASK = "scd_capability_toy"


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lm_eval_task")
    docs = root / "docs.jsonl"
    docs.write_text(
        "".join(json.dumps({"question": q, "choices": c, "label": t}) + "\n" for q, c, t in DOCS)
    )
    task = {
        "task": TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(docs)}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{question}}",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "label",
        "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
            {"metric": "brier_score", "aggregation": "brier_score", "higher_is_better": False},
        ],  # continuous: any change of the model shows
    }
    (root / f"{TASK}.yaml").write_text(yaml.safe_dump(task))
    return root


def _direct(toy_model: Path, task_dir: Path, adapter: Path | None) -> dict:
    """The same task, lm-eval's way: the model named by its model_args."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    args = f"pretrained={toy_model},dtype=float32" + (f",peft={adapter}" if adapter else "")
    manager = TaskManager(include_path=str(task_dir))
    res = lm_eval.simple_evaluate(
        model="hf",
        model_args=args,
        tasks=[TASK],
        device="cpu",
        batch_size=8,
        task_manager=manager,
        apply_chat_template=True,
        log_samples=False,
    )
    return res["results"][TASK]


@pytest.mark.slow
def test_lm_eval_scores_the_base_and_the_adapter(toy_model, adapter, task_dir, tmp_path):
    pytest.importorskip("lm_eval")
    got = {}
    for name, lora in (("base", None), ("lora", adapter)):
        out = tmp_path / name
        flat = lm_eval_scores(
            str(toy_model),
            out,
            tasks=[TASK],
            include_path=str(task_dir),
            adapter=str(lora) if lora else None,
        )
        assert 0 <= flat[f"{TASK}/acc"] <= 1 and f"{TASK}/acc_stderr" in flat
        assert json.loads((out / "lm_eval.json").read_text()) == flat
        stored = json.loads((out / "lm_eval_results.json").read_text())
        assert stored["results"][TASK]["acc,none"] == flat[f"{TASK}/acc"]
        assert stored["scd_config"]["adapter"] == (str(lora) if lora else None)
        assert 0 <= flat[f"{TASK}/brier_score"] <= 2
        direct = _direct(toy_model, task_dir, lora)  # lm-eval on its own finds the same
        assert flat[f"{TASK}/acc"] == direct["acc,none"]
        assert flat[f"{TASK}/brier_score"] == pytest.approx(direct["brier_score,none"], abs=1e-6)
        got[name] = flat
    assert abs(got["base"][f"{TASK}/brier_score"] - got["lora"][f"{TASK}/brier_score"]) > 1e-4


@pytest.mark.slow
def test_lm_eval_resumes_and_refuses_unknown_tasks(toy_model, task_dir, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    with pytest.raises(InputError, match="capability.lm_eval_tasks.*'no_such_task'"):
        lm_eval_scores(
            str(toy_model), tmp_path / "x", tasks=["no_such_task"], include_path=str(task_dir)
        )
    assert not (tmp_path / "x").exists()
    out = tmp_path / "resume"
    first = lm_eval_scores(str(toy_model), out, tasks=[TASK], include_path=str(task_dir), limit=4)

    import lm_eval.models.huggingface as hf

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(hf, "HFLM", refuse)
    again = lm_eval_scores(str(toy_model), out, tasks=[TASK], include_path=str(task_dir), limit=4)
    assert again == first
    with pytest.raises(InputError, match="another configuration.*limit"):
        lm_eval_scores(str(toy_model), out, tasks=[TASK], include_path=str(task_dir), limit=5)
