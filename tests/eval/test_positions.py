"""A steering vector added from the assistant's turn on (the steer arm's default since #77): where
the turn begins in each prompt format, which positions of a pass it marks (padding either side, a
prompt cut before its last token, a pass that continues a KV cache), and the hf engine adding it
there -- batched, through the prefix cache and multi-token options, as a forward pass by hand
that adds it from the turn's first token on -- which differs from adding it everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from scd.eval.positions import turn_ids, turn_mask
from scd.eval.steering import load_steering, save_steering
from scd.models import model_fingerprint


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("qwen3", "<|im_end|>\n<|im_start|>assistant\n"),
        ("llama-3.1-instruct", "<|eot_id|><|start_header_id|>assistant<|end_header_id|>"),
        ("llama-2-chat", "[/INST]"),
    ],
)
def test_the_turn_is_what_the_template_writes_after_the_users_message(real_tokenizers, name, says):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(real_tokenizers / name)
    text = tokenizer.decode(turn_ids(tokenizer))
    assert says in text and "question" not in text and "?" not in text, text


def test_the_toys_turn_is_its_assistant_token(toy_model) -> None:
    from scd.models.formatting import load_tokenizer

    tokenizer = load_tokenizer(str(toy_model))
    assert turn_ids(tokenizer) == (tokenizer.convert_tokens_to_ids("<|assistant|>"),)


def test_the_mask_starts_at_the_last_turn_in_each_row() -> None:
    turn = (7, 8)
    ids = torch.tensor(
        [
            [0, 0, 5, 7, 8, 3, 7, 8],  # left padding; two turns: the last one counts
            [5, 6, 7, 8, 9, 0, 0, 0],  # right padding (0 is padding: never matched)
            [5, 6, 5, 6, 5, 6, 5, 7],  # the turn cut by the row's end (a prompt less its last)
            [5, 6, 5, 6, 5, 6, 5, 6],  # no turn
        ]
    )
    valid = torch.tensor(
        [[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0, 0], [1] * 8, [1] * 8], dtype=torch.bool
    )
    none = torch.zeros(4, dtype=torch.bool)
    mask, begun = turn_mask(ids, turn, valid, none)
    fresh = mask.int().tolist()
    assert fresh[0] == [0, 0, 0, 0, 0, 0, 1, 1]
    assert fresh[1][:5] == [0, 0, 1, 1, 1]
    assert fresh[2] == [0] * 7 + [1]
    assert fresh[3] == [0] * 8  # before the turn (the head a batch shares): none of it
    assert begun.tolist() == [True, True, True, False]
    # a pass continuing a cache in which the last row's turn began: all of that row
    mask, begun = turn_mask(ids, turn, valid, torch.tensor([False, False, False, True]))
    assert mask.int().tolist()[:3] == fresh[:3] and mask.int().tolist()[3] == [1] * 8
    assert begun.all()


def _requests(toy_model: Path, toy_prompts: Path, n: int = 12):
    """Formatted toy prompts of several templates after a system prompt (a head the prefix
    cache shares) with a single-token and a two-token option."""
    import pyarrow.parquet as pq

    from scd.data_gen.contact import user_text
    from scd.eval.engines import ChoiceRequest
    from scd.models.formatting import Formatter, load_tokenizer

    fmt = Formatter(load_tokenizer(str(toy_model)), " ".join(["Answer", "the", "question"] * 6))
    rows = pq.read_table(toy_prompts / "prompts.parquet").slice(0, 400).to_pylist()[::33][:n]
    yes, no = fmt.option_ids(("Yes", "No"))
    return fmt, [ChoiceRequest(tuple(fmt.encode([user_text(r)])[0]), (yes, no + yes)) for r in rows]


def _directory(toy_model: Path, out: Path, positions: str) -> Path:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(toy_model)
    torch.manual_seed(3)
    vectors = torch.randn(config.num_hidden_layers, config.hidden_size)
    fingerprint = model_fingerprint(str(toy_model))
    return save_steering(out, vectors, 0, 0.5, fingerprint, positions)


def test_added_from_the_turn_batched_as_by_hand_and_not_as_everywhere(
    toy_model, toy_prompts, tmp_path
) -> None:
    from transformers import AutoModelForCausalLM

    from scd.eval.engines import engine_spec
    from scd.eval.engines.hf import MIN_SHARED_HEAD, HFEngine

    fmt, requests = _requests(toy_model, toy_prompts)
    answer = _directory(toy_model, tmp_path / "answer", "answer")
    spec = engine_spec("hf", steer=str(answer), batch_size=8, prefix_cache=True)
    engine = HFEngine(str(toy_model), spec, tokenizer=fmt.tokenizer)
    batched = [x for row in engine.score(requests) for x in row]
    alone = [x for r in requests for x in engine.score([r])[0]]
    assert batched == pytest.approx(alone, abs=1e-5)
    assert engine._head(sorted(r.prompt_ids for r in requests)[:8], 2) >= MIN_SHARED_HEAD
    model = AutoModelForCausalLM.from_pretrained(toy_model).eval()
    vector = load_steering(answer).added()[0]
    by_hand = []
    for r in requests:
        for option in r.option_ids:
            seq = torch.tensor([list(r.prompt_ids) + list(option)])
            start = len(r.prompt_ids) - 1  # the toy's turn: its <|assistant|> token
            mask = (torch.arange(seq.shape[1]) >= start)[None, :, None].float()

            def add(module, args, output, mask=mask):
                hidden = output[0] if isinstance(output, tuple) else output
                return hidden + mask * vector

            handle = model.model.layers[0].register_forward_hook(add)
            with torch.inference_mode():
                logp = model(input_ids=seq).logits[0].log_softmax(-1)
            handle.remove()
            n = len(r.prompt_ids)
            by_hand.append(sum(float(logp[n - 1 + j, t]) for j, t in enumerate(option)))
    assert batched == pytest.approx(by_hand, abs=1e-4)
    everywhere = _directory(toy_model, tmp_path / "all", "all")
    engine.use_steering(str(everywhere))
    elsewhere = [x for row in engine.score(requests) for x in row]
    assert max(abs(a - b) for a, b in zip(elsewhere, batched)) > 1e-2
    assert load_steering(everywhere).digest() != load_steering(answer).digest()
    texts = engine.generate([list(r.prompt_ids) for r in requests[:4]], 3)
    engine.use_steering(None)
    assert len(texts) == 4 and all(isinstance(t, str) for t in texts)


def test_a_directory_without_positions_adds_everywhere_as_it_did(toy_model, tmp_path) -> None:
    """A steering directory written before #77 (no ``positions`` in steer.json) is read as
    added at every position, with the identity it had."""
    import json

    old = _directory(toy_model, tmp_path / "old", "all")
    info = json.loads((old / "steer.json").read_text())
    del info["positions"]
    (old / "steer.json").write_text(json.dumps(info))
    steering = load_steering(old)
    assert steering.positions == "all"
    data = __import__("hashlib").sha256((old / "vectors.safetensors").read_bytes())
    data.update(json.dumps([0, 0.5, steering.fingerprint]).encode())
    assert steering.digest() == data.hexdigest()  # the digest an earlier scd gave it
