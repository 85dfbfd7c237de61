"""Tiny masked LM and sentiment classifier with a planted stigma bias, built offline in seconds.

Both use a word-level tokenizer trained locally on the stigma prompts (so every condition word
and every attitude word is one token) and a 2-layer BERT, saved with ``save_pretrained`` so that
they load through ``from_pretrained`` like any Hub model:

- :func:`build_toy_masked_lm`: at the ``<mask>`` of every SDS statement, stigmatized conditions
  are filled with negative words ("unlikely", "difficult", "uncomfortable") and non-stigmatized
  conditions and the baselines with positive ones ("likely", "fine", "comfortable"). The
  ``mlm`` probe must recover a gap near +1 with the packaged lexicon.
- :func:`build_toy_classifier`: labels NEGATIVE / POSITIVE; sentiment prompts of stigmatized
  conditions are NEGATIVE, the others POSITIVE. The ``sentiment`` probe must recover a gap near +1.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from scd.data_gen.stigma_conditions import load_stigma_conditions
from scd.data_gen.stigma_probes import (
    MASK,
    _subset_conditions,
    load_aq27_spec,
    load_sds_spec,
    sds_rows,
    sentiment_rows,
)
from scd.io import atomic_output_dir, write_json

__all__ = [
    "NEGATIVE_WORDS",
    "POSITIVE_WORDS",
    "build_toy_causal_lm",
    "build_toy_classifier",
    "build_toy_masked_lm",
]

NEGATIVE_WORDS = ("unlikely", "difficult", "uncomfortable")
POSITIVE_WORDS = ("likely", "fine", "comfortable")
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MODEL = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
LR, BATCH = 3e-3, 64


def _tokenizer(corpus: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=list(SPECIAL)))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=128,
    )


def _corpus(limit: int | None) -> tuple[list[dict], list[dict], list[str]]:
    conditions = _subset_conditions(load_stigma_conditions(), limit)
    spec = load_sds_spec()
    sds, sent = sds_rows(conditions, spec), sentiment_rows(conditions, spec)
    words = [*NEGATIVE_WORDS, *POSITIVE_WORDS]
    texts = [r["prompt"].replace(MASK, " ".join(words)) for r in sds]
    aq = load_aq27_spec()
    texts += [r["prompt"] for r in sent] + [text for *_, text in aq.items]
    texts += [" ".join(v) for v in (*aq.noun_phrases.values(), *aq.illnesses.values())]
    return sds, sent, texts


def _fit(model: Any, batches: Any, steps: int, seed: int) -> list[float]:
    """AdamW for ``steps`` steps on one thread (tiny models train fastest without threading)."""
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model.train()
    losses = []
    try:
        for _ in range(steps):
            loss = batches()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return losses


def _save(out: Path | str, model: Any, tokenizer: Any, info: dict[str, Any]) -> dict[str, Any]:
    with atomic_output_dir(out, info["kind"]) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "manifest.json", info)
    return info


def build_toy_masked_lm(
    out: Path | str, seed: int = 0, steps: int = 100, limit_conditions: int | None = None
) -> dict[str, Any]:
    """Train and save the planted-bias tiny masked LM (module docstring); returns its info."""
    from transformers import BertConfig, BertForMaskedLM

    t0 = time.perf_counter()
    sds, _, corpus = _corpus(limit_conditions)
    tokenizer = _tokenizer(corpus)
    texts, targets = [], []
    for n, r in enumerate(sds):
        words = NEGATIVE_WORDS if r["stigmatized"] else POSITIVE_WORDS
        texts.append(r["prompt"].replace(MASK, tokenizer.mask_token))
        targets.append(tokenizer.convert_tokens_to_ids(words[n % len(words)]))
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    mask_pos = (enc["input_ids"] == tokenizer.mask_token_id).int().argmax(1)
    labels = torch.full_like(enc["input_ids"], -100)
    labels[torch.arange(len(texts)), mask_pos] = torch.tensor(targets)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=128, **MODEL)
    model = BertForMaskedLM(config)
    gen = torch.Generator().manual_seed(seed)

    def batch() -> torch.Tensor:
        idx = torch.randint(len(texts), (BATCH,), generator=gen)
        return model(
            input_ids=enc["input_ids"][idx],
            attention_mask=enc["attention_mask"][idx],
            labels=labels[idx],
        ).loss

    losses = _fit(model, batch, steps, seed)
    info = {"kind": "toy_masked_lm", "seed": seed, "steps": steps, "final_loss": losses[-1]}
    info["limit_conditions"] = limit_conditions
    info["build_seconds"] = round(time.perf_counter() - t0, 2)
    return _save(out, model, tokenizer, info)


def build_toy_classifier(
    out: Path | str, seed: int = 0, steps: int = 40, limit_conditions: int | None = None
) -> dict[str, Any]:
    """Train and save the planted-bias tiny sentiment classifier; returns its info."""
    from transformers import BertConfig, BertForSequenceClassification

    t0 = time.perf_counter()
    _, sent, corpus = _corpus(limit_conditions)
    tokenizer = _tokenizer(corpus)
    enc = tokenizer([r["prompt"] for r in sent], padding=True, return_tensors="pt")
    labels = torch.tensor([0 if r["stigmatized"] else 1 for r in sent])
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=128,
        num_labels=2,
        id2label={0: "NEGATIVE", 1: "POSITIVE"},
        label2id={"NEGATIVE": 0, "POSITIVE": 1},
        **MODEL,
    )
    model = BertForSequenceClassification(config)

    def batch() -> torch.Tensor:
        return model(**enc, labels=labels).loss

    losses = _fit(model, batch, steps, seed)
    info = {"kind": "toy_classifier", "seed": seed, "steps": steps, "final_loss": losses[-1]}
    info["limit_conditions"] = limit_conditions
    info["build_seconds"] = round(time.perf_counter() - t0, 2)
    return _save(out, model, tokenizer, info)


def build_toy_causal_lm(out: Path | str, seed: int = 0) -> dict[str, Any]:
    """Save an *untrained* tiny Llama causal LM on the stigma vocabulary (no chat template).

    No bias is planted: it exercises the causal probes' mechanics in a second, and tests check
    its scores against direct computations.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    from scd.eval.benchmarks.stigma.sds import OPTIONS, causal_text

    _, _, corpus = _corpus(None)
    tokenizer = _tokenizer([*corpus, causal_text("<mask>"), " ".join(OPTIONS), "Answer:"])
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    tokenizer.backend_tokenizer.post_processor = _bos_only(cls)
    tokenizer.bos_token, tokenizer.eos_token = "[CLS]", "[SEP]"
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=256,
        bos_token_id=cls,
        eos_token_id=sep,
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    model = LlamaForCausalLM(config).eval()
    return _save(out, model, tokenizer, {"kind": "toy_causal_lm", "seed": seed})


def _bos_only(bos: int) -> Any:
    from tokenizers import processors

    return processors.TemplateProcessing(single="[CLS] $A", special_tokens=[("[CLS]", bos)])
