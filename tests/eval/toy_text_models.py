"""A tiny causal LM trained on given texts, offline in seconds: a word-level tokenizer over the
texts (every word one token) with the toy model's chat template, and a 2-layer Llama trained on
every token of every text. What it prefers is what the texts say -- a planted preference, or
none -- the ground truth for the benchmarks beyond the templates."""

from __future__ import annotations

from pathlib import Path

import torch

from scd.models.toy_tokenizer import word_tokenizer


def chat_text(user: str, reply: str) -> str:
    """``user`` and ``reply`` as the toy chat template renders them (what the model reads)."""
    return f"<s><|user|> {user} <|assistant|> {reply} </s> "


def train_text_lm(
    texts: list[str], out: Path, *, seed: int = 0, steps: int = 300, replies: bool = False
) -> Path:
    """Train and save a tiny causal LM on ``texts`` (repeated, shuffled); return ``out``.
    ``replies``: the loss on what follows ``<|assistant|>`` only (a chat model's answers)."""
    from torch.nn.utils.rnn import pad_sequence
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = word_tokenizer(texts)  # the toy model's own: word level, its chat template
    seqs = [torch.tensor(fast(t)["input_ids"]) for t in texts]
    ids = pad_sequence(seqs, batch_first=True, padding_value=fast.pad_token_id)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=256,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    model = LlamaForCausalLM(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = ids[torch.randint(len(ids), (min(64, len(ids)),), generator=gen)]
        labels = batch.masked_fill(batch == fast.pad_token_id, -100)
        if replies:  # nothing before the reply is learned
            turn = fast.convert_tokens_to_ids("<|assistant|>")
            labels = labels.masked_fill((batch == turn).long().cumsum(1) == 0, -100)
        loss = model(input_ids=batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval().save_pretrained(out)
    fast.save_pretrained(out)
    return out
