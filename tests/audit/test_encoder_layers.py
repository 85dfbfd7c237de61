"""A language model as the SCM encoder (tiny random-weight Llamas around real tokenizers): its
first N layers are kept with their trained weights, batches are padded without shifting a causal
model's positions, a bad N is one line, and N is part of the cache key."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from scd.audit.audit import load_encoder
from scd.cli import main
from scd.errors import InputError

TEXTS = ["these people are always kind", "a", "these people are always clumsy and slow"]


def _mean_hidden(path, text: str, layers: int) -> np.ndarray:
    """The mean over a text's tokens of the last hidden state of the model cut to ``layers``,
    one text at a time (no padding), straight from transformers."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(path, num_hidden_layers=layers).eval()
    with torch.no_grad():
        hidden = model(**AutoTokenizer.from_pretrained(path)(text, return_tensors="pt"))
    return hidden.last_hidden_state[0].mean(0).numpy()


@pytest.fixture(scope="module")
def tiny_gpt2(real_tokenizers, tmp_path_factory) -> str:
    """A tiny GPT-2 (learned absolute positions: a left pad would shift every real token)
    around the Llama-2-chat tokenizer (pads on the left, has no pad token)."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(real_tokenizers / "llama-2-chat")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    out = tmp_path_factory.mktemp("gpt2") / "tiny-gpt2"
    GPT2LMHeadModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize("family", ["gpt2", "llama-2-chat", "llama-3.1-instruct"])
def test_a_language_model_keeps_its_first_layers(family, tiny_chat_models, tiny_gpt2) -> None:
    from transformers import AutoModel

    path = tiny_gpt2 if family == "gpt2" else tiny_chat_models[family]
    encoder = load_encoder(str(path), "cpu", layers=1)
    inner = encoder[0].auto_model
    layers = inner.h if family == "gpt2" else inner.layers
    assert inner.config.num_hidden_layers == 1 and len(layers) == 1
    full = AutoModel.from_pretrained(path)
    trained = (full.h if family == "gpt2" else full.layers)[0].state_dict()
    assert all(torch.equal(t, trained[k]) for k, t in layers[0].state_dict().items())
    batch = encoder.encode(TEXTS, batch_size=3)  # padded to the longest text
    for text, vector in zip(TEXTS, batch):
        assert np.allclose(vector, _mean_hidden(path, text, 1), atol=1e-5), text
    assert not np.allclose(batch, load_encoder(str(path), "cpu").encode(TEXTS), atol=1e-3)


def test_more_layers_than_the_model_has_is_refused(tiny_chat_models) -> None:
    with pytest.raises(InputError, match=r"--encoder-layers 3: expected 1 to 2"):
        load_encoder(str(tiny_chat_models["qwen3"]), "cpu", layers=3)


def test_the_layer_count_is_part_of_the_cache_key(
    tiny_chat_models, scm_seeds, corpus_file, tmp_path, capsys, monkeypatch
) -> None:
    cache = tmp_path / "cache"
    argv = [
        "audit",
        "scm",
        "--corpus",
        str(corpus_file),
        "--seeds",
        str(scm_seeds),
        "--encoder",
        str(tiny_chat_models["llama-3.1-instruct"]),
        "--cache",
        str(cache),
        "--no-progress",
    ]
    warmth = {}
    for layers in ("1", "2"):
        out = tmp_path / f"out{layers}"
        assert main([*argv, "--encoder-layers", layers, "--out", str(out)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["run"]["encoder_layers"] == int(layers)
        assert summary["scm_model"]["encoder"].endswith(f"@layers={layers}")
        warmth[layers] = summary["types"]["mental"]["warmth"]["mean"]
    assert len(list((cache / "scm-model").iterdir())) == 2  # one SCM model per layer count
    assert warmth["1"] != warmth["2"]
    capsys.readouterr()
    monkeypatch.chdir(tiny_chat_models["llama-3.1-instruct"].parent)  # the error names it as given
    argv[argv.index("--encoder") + 1] = "./llama-3.1-instruct"
    code = main([*argv, "--encoder-layers", "9", "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--encoder-layers 9: expected 1 to 2 (the layers of ./llama-3.1-instruct)" in err, err
    assert not (tmp_path / "bad").exists()


def test_layers_of_an_encoder_without_a_config_are_refused(planted_encoder) -> None:
    with pytest.raises(InputError, match=r"--encoder .*needs the encoder's config.json"):
        load_encoder(str(planted_encoder), "cpu", layers=1)
