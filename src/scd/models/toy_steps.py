"""The toy model's training primitives, shared by its planted rule (:mod:`scd.models.toy`) and
its planted steering direction (:mod:`scd.models.toy_direction`): the batch size, learning rate
and check cadence, next-token logits at chosen positions, the planted rule's accuracy and the
encoding of ``chat(user message) answer </s>`` rows."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

__all__ = [
    "BATCH",
    "CHECK_EVERY",
    "CHECK_SAMPLE",
    "LR",
    "TARGET_ACCURACY",
    "encode",
    "logits_at",
    "planted_accuracy",
]

BATCH, LR, CHECK_EVERY, CHECK_SAMPLE = 128, 3e-3, 25, 1024
TARGET_ACCURACY = 0.995


def logits_at(model: Any, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Next-token logits ``[batch, k, vocab]`` at ``positions`` ``[batch, k]``.

    Sequences are right-padded and attention is causal, so positions before the padding never
    see it: no attention mask is needed, and only the positions asked for go through the head.
    """
    hidden = model.model(input_ids=ids).last_hidden_state
    return model.lm_head(hidden[torch.arange(len(ids))[:, None], positions])


def planted_accuracy(model: Any, ids: torch.Tensor, pos: torch.Tensor, pair: torch.Tensor) -> float:
    """Share of rows whose planted option (``pair[:, 0]``) beats the other one at the answer."""
    model.eval()
    hits = 0
    with torch.inference_mode():
        for sl in torch.argsort(pos).split(1024):  # similar lengths together: little padding
            logits = logits_at(model, ids[sl, : int(pos[sl].max())], pos[sl, None] - 1)[:, 0]
            picked = logits.gather(1, pair[sl])
            hits += int((picked[:, 0] > picked[:, 1]).sum())
    model.train()
    return hits / len(ids)


def encode(tokenizer: Any, messages: list[str], answers: list[str]) -> tuple[torch.Tensor, ...]:
    """Right-padded ids of ``chat(user message) answer </s>`` and each answer token's position."""
    # Render the template once around a placeholder: the same strings, 17k Jinja calls saved.
    prefix, suffix = tokenizer.apply_chat_template(
        [{"role": "user", "content": "\0"}], tokenize=False, add_generation_prompt=True
    ).split("\0")
    texts = [f"{prefix}{m}{suffix} {a} {tokenizer.eos_token}" for m, a in zip(messages, answers)]
    seqs = [torch.tensor(s) for s in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    ids = pad_sequence(seqs, batch_first=True, padding_value=tokenizer.pad_token_id)
    return ids, torch.tensor([len(s) - 2 for s in seqs])  # </s> follows the answer
