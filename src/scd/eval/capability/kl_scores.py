"""The KL divergence of an arm from its base model, prompt by prompt: the neutral prompts with
their reference replies as token sequences, the arm's model loaded (its adapter unmerged), and
per prompt the mean KL(arm || base) over the reply's positions with both log-likelihoods
(:mod:`scd.eval.capability.kl` runs, records and summarizes them)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from scd.errors import InputError, first_line

__all__ = ["Seqs", "load_arm", "reply_sequences", "score_replies"]

Seqs = list[list[int]]


# -- token sequences -------------------------------------------------------------------------
def _reply_ids(fmt: Any, user: str, reply: str, prompt_ids: list[int], item_id: str) -> list[int]:
    """The tokens the template renders after the prompt when ``reply`` is the assistant's turn."""
    _, full_text = fmt.exchange_texts(user, reply)
    full_ids = fmt.tokenizer(full_text, add_special_tokens=not fmt.chat)["input_ids"]
    n = len(prompt_ids)
    if list(full_ids[:n]) != list(prompt_ids) or len(full_ids) == n:
        raise InputError(
            f"neutral prompt {item_id}: the chat template renders the prompt "
            "differently when a reply follows it (or renders no reply); the reply "
            "cannot be teacher-forced"
        )
    return list(full_ids[n:])


def reply_sequences(
    tokenizer: Any, system_prompt: str | None, items: list[dict[str, str]]
) -> tuple[Seqs, Seqs, list[int]]:
    """(base sequences, arm sequences, reply lengths): each prompt's ids + the same reply ids."""
    from scd.models.formatting import Formatter

    base = Formatter(tokenizer)
    users = [it["instruction"] for it in items]
    base_prompts = base.encode(users)
    arm_prompts = Formatter(tokenizer, system_prompt).encode(users) if system_prompt else None
    base_seqs, arm_seqs, spans = [], [], []
    for i, it in enumerate(items):
        reply = _reply_ids(base, it["instruction"], it["response"], base_prompts[i], it["id"])
        base_seqs.append(list(base_prompts[i]) + reply)
        arm_seqs.append(list(arm_prompts[i] if arm_prompts else base_prompts[i]) + reply)
        spans.append(len(reply))
    return base_seqs, arm_seqs, spans


# -- the model -------------------------------------------------------------------------------
def load_arm(model_dir: str, adapter: str | None, device: str, dtype: str) -> Any:
    """The causal LM (no remote code), with ``adapter`` loaded unmerged, in eval mode."""
    import torch

    from scd.eval.engines.hf_setup import load_model

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("no CUDA GPU is available here", key="device", value=device)
    lm = load_model(model_dir, device, dtype)
    if adapter is None:
        return lm
    from peft import PeftModel

    try:
        lm = PeftModel.from_pretrained(lm, adapter)
    except (RuntimeError, ValueError, KeyError) as err:
        raise InputError(
            f"does not fit the model {model_dir} ({first_line(err)})", key="adapter", value=adapter
        ) from None
    return lm.to(device).eval()


def _reply_logprobs(model: Any, seqs: Seqs, spans: list[int], pad_id: int) -> Any:
    """Float32 log-probabilities over the vocabulary at each reply position: [batch, span, V]
    (row i's first ``spans[i]`` rows predict its reply tokens). Left padding, positions from the
    attention mask, logits only at the last ``max(spans) + 1`` positions."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    device = next(model.parameters()).device
    rows = [torch.tensor(s, dtype=torch.long) for s in seqs]
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_id, padding_side="left")
    mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True, padding_side="left")
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    span = max(spans)
    logits = model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        logits_to_keep=span + 1,
    ).logits[:, :-1]  # position t predicts token t + 1: drop the last
    out = torch.log_softmax(logits.float(), dim=-1)
    # row i's reply occupies its last spans[i] tokens: predicted by the last spans[i] kept rows
    index = torch.stack([torch.arange(span) + span - s for s in spans]).clamp(max=span - 1)
    return out.gather(1, index.to(out.device)[..., None].expand(-1, -1, out.shape[-1]))


def score_replies(
    model: Any,
    base_seqs: Seqs,
    arm_seqs: Seqs,
    spans: list[int],
    *,
    pad_id: int,
    batch_size: int,
    update: Callable[[int], None],
    arm: Any = None,
    tokenizer: Any = None,
    base_cache: dict[int, Any] | None = None,
) -> list[dict[str, float]]:
    """Per prompt: mean KL(arm || base) over reply positions and both mean log-likelihoods;
    ``arm``: what the arm applies and the base does not (a steering vector, an eraser: its
    ``applied(model, tokenizer)``); ``base_cache``: the base's reply log-probabilities by prompt
    index, filled where missing and read where there (a caller measuring many arms of one
    unchanging base computes it once)."""
    import contextlib

    import torch
    import torch.nn.functional as F
    from peft import PeftModel

    # the base: the same model with its adapter layers off
    base_ctx = model.disable_adapter if isinstance(model, PeftModel) else contextlib.nullcontext
    arm_ctx = contextlib.nullcontext
    if arm is not None:
        arm_ctx = functools.partial(arm.applied, model, tokenizer)
    order = sorted(range(len(spans)), key=lambda i: -len(arm_seqs[i]))
    results: list[Any] = [None] * len(spans)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            sub = [spans[i] for i in batch]
            if base_cache is None or any(i not in base_cache for i in batch):
                with base_ctx():
                    base = _reply_logprobs(model, [base_seqs[i] for i in batch], sub, pad_id)
                rows = {i: base[j, : spans[i]] for j, i in enumerate(batch)}
                if base_cache is not None:
                    base_cache.update({i: row.clone() for i, row in rows.items()})
            else:
                rows = {i: base_cache[i] for i in batch}
            # measured for every arm, the base model's own too (where it must come out 0)
            with arm_ctx():
                arm = _reply_logprobs(model, [arm_seqs[i] for i in batch], sub, pad_id)
            for j, i in enumerate(batch):
                n = spans[i]
                lp_base, lp_arm = rows[i], arm[j, :n]
                targets = torch.tensor(base_seqs[i][-n:], device=lp_base.device)[:, None]
                # D_KL(p_arm || p_base) per position; rounding can dip below 0
                kl = F.kl_div(lp_base, lp_arm, reduction="none", log_target=True).sum(-1)
                kl = kl.clamp(min=0).mean().item()
                results[i] = {
                    "kl": kl,
                    "logp_arm": lp_arm.gather(1, targets).mean().item(),
                    "logp_base": lp_base.gather(1, targets).mean().item(),
                }
            update(len(batch))
    return results
