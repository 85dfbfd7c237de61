"""Real tokenizers and chat templates: what is scored is what the template writes, what the
engine computes is what a plain forward pass gives, and what training trains is what evaluation
scores -- for Llama 2 chat, Llama 3.1 Instruct, Qwen3, Qwen2.5-Coder (tiny random-weight models
around their real tokenizers; Qwen2.5-Coder's from its converted GGUF), SmolLM2-135M-Instruct (the
real model) and the plain format of base models.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.benchmarks.bbq.data import load_bbq, prompt_text
from scd.eval.benchmarks.bias.task import load_work
from scd.eval.engines import ChoiceRequest, engine_spec
from scd.eval.engines.hf import HFEngine
from scd.models.formatting import Formatter, load_tokenizer, parse_answer

# name: (BOS tokens in a prompt, text the prompt ends with, the template's end-of-turn tokens)
EXPECT = {
    "llama-2-chat": (1, "[/INST]", ["▁", "</s>"]),
    "llama-3.1-instruct": (1, "<|start_header_id|>assistant<|end_header_id|>\n\n", ["<|eot_id|>"]),
    "qwen3": (0, "<|im_start|>assistant\n<think>\n\n</think>\n\n", ["<|im_end|>", "Ċ"]),
    "smollm2": (None, "<|im_start|>assistant\n", ["<|im_end|>", "Ċ"]),
    "qwen2.5-coder": (0, "<|im_start|>assistant\n", ["<|im_end|>", "Ċ"]),
    "plain": (1, "\nAnswer:", ["</s>"]),  # the Llama 2 tokenizer without a chat template
}
NAMES = [
    "llama-2-chat",
    "llama-3.1-instruct",
    "qwen3",
    pytest.param("smollm2", marks=pytest.mark.slow),
    pytest.param("qwen2.5-coder", marks=pytest.mark.slow),  # its tokenizer, tiny weights
    "plain",
]
OPTIONS = (["Yes", "No"], ["Likely", "Unlikely"], ["Mostly", "Rarely"])


@pytest.fixture(scope="module")
def models(request, tiny_chat_models, real_tokenizers, tmp_path_factory, tiny_model_builder):
    """Lazily: name -> model directory (SmolLM2 is fetched only when a test asks for it)."""
    build_tiny_model = tiny_model_builder
    cache: dict[str, Path] = dict(tiny_chat_models)

    def get(name: str) -> Path:
        if name == "smollm2":
            cache[name] = request.getfixturevalue("smollm2").model
        if name == "qwen2.5-coder" and name not in cache:
            tokenizer = request.getfixturevalue("qwen_coder").model  # the converted GGUF's
            cache[name] = build_tiny_model(tokenizer, tmp_path_factory.mktemp("qwen") / "model")
        if name == "plain" and name not in cache:
            out = tmp_path_factory.mktemp("plain") / "model"
            cache[name] = build_tiny_model(real_tokenizers / "llama-2-chat", out, False)
        return cache[name]

    return get


@pytest.fixture(scope="module")
def user_texts(toy_prompts: Path, shared_data: Path) -> list[tuple[str, list[str]]]:
    """12 contact prompts (all three scales) and 2 BBQ items: (user text, options)."""
    work = [w for w in load_work(toy_prompts, 12, seed=0) if not w["baseline"]]
    items = load_bbq(shared_data / "bbq" / "data", categories=["Age"])[:2]
    return [(f"{w['prompt']} {w['instruction']}", list(w["options"])) for w in work] + [
        (prompt_text(it), [it["ans0"], it["ans1"], it["ans2"]]) for it in items
    ]


@pytest.mark.parametrize("name", NAMES)
def test_prompt_ids_hold_one_bos_and_end_with_the_generation_prompt(name, models):
    tok = load_tokenizer(str(models(name)))
    fmt = Formatter(tok)
    n_bos, ending, _ = EXPECT[name]
    ids = fmt.encode(["Should I help my neighbour?"])[0]
    if fmt.chat:  # exactly what transformers' own tokenized chat template gives
        msgs = [{"role": "user", "content": "Should I help my neighbour?"}]
        ref = tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False)
        assert ids == list(ref["input_ids"])
    if n_bos is not None:
        assert ids.count(tok.bos_token_id) == n_bos if tok.bos_token_id is not None else n_bos == 0
    assert ids[0] != ids[1] or ids[0] != tok.bos_token_id  # never a doubled BOS
    assert tok.decode(ids).endswith(ending)


def _conversation_ids(fmt: Formatter, user: str, reply: str) -> list[list[int]]:
    """[prompt ids, prompt + reply ids] of one exchange, rendered and tokenized as training does."""
    prompt = fmt.text(user)
    if fmt.chat:
        full = fmt.render(fmt.messages(user, reply), False)
    else:
        full = f"{prompt} {reply}{fmt.tokenizer.eos_token}"
    return [fmt.tokenizer(t, add_special_tokens=not fmt.chat)["input_ids"] for t in (prompt, full)]


@pytest.mark.parametrize("name", NAMES)
def test_option_tokens_are_the_templates_own_reply(name, models):
    tok = load_tokenizer(str(models(name)))
    fmt = Formatter(tok)
    end_of_turn = EXPECT[name][2]
    for options in OPTIONS:
        scored = fmt.option_ids(options)
        for option, ids in zip(options, scored):
            prompt, full = _conversation_ids(fmt, "Should I help my neighbour?", option)
            assert full[: len(prompt)] == prompt
            reply = tok.convert_ids_to_tokens(full[len(prompt) :])
            assert reply == tok.convert_ids_to_tokens(list(ids)) + end_of_turn
            assert tok.decode(list(ids)).strip() == option


def _naive(model, prompt: list[int], option: tuple[int, ...]) -> float:
    """One unpadded forward pass over prompt + option; the option's summed log-probability."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + list(option)])).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)
    return sum(float(logprobs[len(prompt) - 1 + j, t]) for j, t in enumerate(option))


@pytest.fixture(scope="module")
def naive_scores(models, user_texts):
    from transformers import AutoModelForCausalLM

    done = {}

    def get(name: str):
        if name not in done:
            path = str(models(name))
            tok = load_tokenizer(path)
            fmt = Formatter(tok)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            reqs = [
                ChoiceRequest(tuple(fmt.encode([u])[0]), fmt.option_ids(o)) for u, o in user_texts
            ]
            done[name] = (
                reqs,
                [[_naive(model, list(r.prompt_ids), o) for o in r.option_ids] for r in reqs],
            )
        return done[name]

    return get


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("batch_size", [1, 32])
@pytest.mark.parametrize("side", ["left", "right"])
def test_choice_scores_equal_a_naive_forward(name, batch_size, side, models, naive_scores):
    reqs, expected = naive_scores(name)
    assert {len(o) for r in reqs for o in r.option_ids} != {1}  # multi-token options covered
    path = str(models(name))
    spec = engine_spec(device="cpu", dtype="float32", batch_size=batch_size)
    engine = HFEngine(path, spec, tokenizer=load_tokenizer(path), padding_side=side)
    got = engine.score(reqs)
    singles = [r for r in reqs if all(len(o) == 1 for o in r.option_ids)]
    got_single = engine.score(singles)  # the single-token fast path on its own
    for g, e in zip(got, expected):
        assert g == pytest.approx(e, abs=1e-4)
    exp_single = [e for r, e in zip(reqs, expected) if r in singles]
    for g, e in zip(got_single, exp_single):
        assert g == pytest.approx(e, abs=1e-4)


def _plant_yes(src: Path, out: Path) -> tuple[Path, str]:
    """Copy of a tiny model that greedily answers its template's "Yes" and then ends its turn:
    the layers add nothing, every token but "Yes" embeds to axis 0 (-> "Yes"), "Yes" embeds to
    axis 1 (-> end of turn)."""
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(str(src))
    yes = Formatter(tok).reply_ids("Yes")[-1]
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb.zero_()
        emb[:, 0] = 1.0
        emb[yes] = 0.0
        emb[yes, 1] = 1.0
        model.model.norm.weight.fill_(1.0)
        head.zero_()
        head[yes, 0] = 10.0
        head[model.generation_config.eos_token_id, 1] = 10.0
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out, tok.convert_ids_to_tokens(yes)


@pytest.mark.parametrize("name", ["llama-2-chat", "llama-3.1-instruct", "qwen3", "plain"])
def test_generate_mode_stops_at_the_end_of_turn_and_parses(name, models, toy_prompts, tmp_path):
    planted, token = _plant_yes(models(name), tmp_path / "planted")
    summary = get("bias").evaluate(
        str(planted),
        tmp_path / "gen",
        prompts=toy_prompts,
        mode="generate",
        limit=30,
        seed=0,
        progress=False,
        engine=engine_spec(device="cpu"),
    )
    records = [json.loads(x) for x in (tmp_path / "gen/records.jsonl").read_text().splitlines()]
    assert token.lstrip("▁Ġ") == "Yes"
    assert records and all(r["generated"] == "Yes" for r in records)
    for r in records:  # "Yes" answers the certainty scale; the other scales do not offer it
        assert r["chosen"] == ("Yes" if r["scale"] == "certainty" else None)
    assert summary["overall"]["unparsed"] > 0
    assert parse_answer("Yes", ["Yes", "No"]) == "Yes"


GEMMA2_LIKE = (  # refuses the system role, as Gemma 2's template does
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
DROPS_SYSTEM = (
    "{{ bos_token }}{% for m in messages if m['role'] != 'system' %}[{{ m['role'] }}] "
    "{{ m['content'] }}{{ eos_token if m['role'] == 'assistant' else '' }}{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


@pytest.mark.parametrize("name", NAMES)
def test_system_prompt_reaches_the_prompt(name, models):
    tok = load_tokenizer(str(models(name)))
    fmt = Formatter(tok, system_prompt="Treat every group fairly.")
    text = tok.decode(fmt.encode(["Should I help?"])[0])
    assert "Treat every group fairly." in text and text.endswith(EXPECT[name][1])


@pytest.mark.parametrize("template", [GEMMA2_LIKE, DROPS_SYSTEM])
def test_templates_without_a_system_role_fail_clearly(template, models, toy_prompts, tmp_path):
    tok = load_tokenizer(str(models("llama-2-chat")))
    tok.chat_template = template
    with pytest.raises(InputError, match="system"):
        Formatter(tok, system_prompt="Be fair.")
    Formatter(tok)  # without a system prompt the template is fine
    model = tmp_path / "model"
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(models("llama-2-chat")).save_pretrained(model)
    tok.save_pretrained(model)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "scd",
        "eval",
        "bias",
        "--model",
        str(model),
        "--prompts",
        str(toy_prompts),
        "--limit",
        "3",
        "--system-prompt",
        "Be fair.",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--system-prompt" in done.stderr
    assert not out.exists()


# ---- training trains what evaluation scores (on TRL's tokenized dataset)


@pytest.fixture(scope="module")
def sft_dir(toy_prompts: Path, tmp_path_factory) -> Path:
    from scd.data_gen.sft import write_sft

    out = tmp_path_factory.mktemp("sft") / "setting1"
    write_sft(toy_prompts, 1, out, max_train=10, max_eval=4, seed=0)
    return out


def _trainer(model: Path, sft: Path, out: Path, *extra: str):
    from scd.pipeline.recipe import recipe_from_dict
    from scd.train.method_trainer import build_trainer
    from scd.train.spec import TrainingSpec

    data = {
        "model": str(model),
        "output_dir": str(out),
        "data": {"sft": str(sft)},
        "lora": {"r": 8},
        "train": {"device": "cpu", "max_steps": 1, "bf16": False},
        "wandb": {"enabled": False},
    }
    for item in extra:
        key, value = item.split("=")
        data["data" if key == "style" else "train"][key] = value == "true" or value
    return build_trainer(TrainingSpec.of(recipe_from_dict(data)), str(model), sft, cuda=False)


@pytest.mark.parametrize("name", NAMES)
def test_training_puts_the_loss_on_the_scored_option_and_the_end_of_turn(
    name, models, sft_dir, tmp_path
):
    import pyarrow.parquet as pq

    trainer, checked = _trainer(models(name), sft_dir, tmp_path / "out")
    assert checked > 0
    tok = trainer.processing_class
    fmt = Formatter(tok)
    rows = pq.read_table(sft_dir / "train.parquet").to_pylist()
    dataset = trainer.train_dataset
    assert len(dataset) == len(rows)
    for row, example in zip(rows, dataset):
        ids = example["input_ids"]
        mask = example.get("completion_mask") or [int(x != -100) for x in example["labels"]]
        trained = [t for t, m in zip(ids, mask) if m]
        start = mask.index(1)
        assert ids[:start] == fmt.encode([row["prompt"][0]["content"]])[0]
        expected = list(fmt.reply_ids(row["answer"]))
        assert tok.convert_ids_to_tokens(trained) == (
            tok.convert_ids_to_tokens(expected) + EXPECT[name][2]
        )
        assert all(m == 1 for m in mask[start:])  # nothing after the completion is skipped


def test_a_mismatch_between_training_and_scoring_is_refused(models, sft_dir):
    import pyarrow.parquet as pq

    from scd.train.sft_rows import check_trained_tokens

    trainer, _ = _trainer(models("llama-2-chat"), sft_dir, sft_dir.parent / "t")
    rows = pq.read_table(sft_dir / "train.parquet").to_pylist()
    tok = trainer.processing_class
    with pytest.raises(InputError, match="would not train what evaluation scores"):
        check_trained_tokens(trainer.train_dataset, rows, Formatter(tok, "A system prompt."))
    swapped = [{**r, "answer": "No" if r["answer"] == "Yes" else "Yes"} for r in rows]
    certainty = [r for r in swapped if r["answer"] in ("Yes", "No")]
    assert certainty
    with pytest.raises(InputError, match="would not train"):
        check_trained_tokens(trainer.train_dataset, swapped, Formatter(tok))
