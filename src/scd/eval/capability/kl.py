"""Drift on neutral text: the KL divergence of an arm from its base model (see
:mod:`scd.eval.capability`)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from statistics import fmean
from typing import Any

from scd.data_gen import data_path
from scd.errors import InputError, first_line
from scd.eval.capability.neutral import NEUTRAL_PROMPTS, load_neutral_prompts
from scd.io import atomic_file, read_json, sha256_file, write_json

__all__ = ["KIND_KL", "kl_from_base", "kl_in_memory", "same_config"]

KIND_KL = "capability_kl"  # summary.json's kind
N_RESAMPLES, SEED = 10_000, 0  # the bootstrap over prompts
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


def _sequences(
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
def _load(model_dir: str, adapter: str | None, device: str, dtype: str) -> Any:
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


def _score(
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


def _interval(values: list[float]) -> tuple[float | None, float | None]:
    """95% percentile bootstrap interval of the mean over prompts (fixed seed); None for < 2."""
    if len(values) < 2:
        return None, None
    import numpy as np
    from scipy import stats

    ci = stats.bootstrap(
        (np.asarray(values),), np.mean, n_resamples=N_RESAMPLES, method="percentile", rng=SEED
    ).confidence_interval
    return float(ci.low), float(ci.high)


def same_config(old: Any, config: dict[str, Any], out: Path) -> Any:
    """``old``, a finished result in ``out``; refused if it has another configuration."""
    if differ := [k for k in config if not isinstance(old, dict) or old.get(k) != config[k]]:
        raise InputError(
            f"holds a capability result of another configuration "
            f"({', '.join(differ)} differ); choose another out (or remove it)",
            key="out",
            value=out,
        )
    return old


def kl_in_memory(
    model: Any,
    tokenizer: Any,
    items: list[dict[str, str]],
    batch_size: int = 8,
    arm: Any = None,
    base_cache: dict[int, Any] | None = None,
) -> dict[str, float | None]:
    """The drift of a model already in memory -- one being trained (its adapter switched off
    for the base), or steered or erased (``arm``: a :class:`~scd.eval.steering.Steering` or
    :class:`~scd.eval.erasure.Erasure`, applied for the arm only) -- from its base on the
    neutral ``items``, as :func:`kl_from_base` measures it:
    the mean KL per prompt over prompts (nats/token) and its 95% bootstrap interval.

    ``base_cache``: a dict the caller keeps between calls on the same ``items``, batch size and
    unchanging base (the steering search's grid points): the base's reply log-probabilities
    (reply tokens x vocabulary, float32, per prompt) are computed on the first call and read on
    the others -- the same numbers, one forward pass per batch instead of two."""
    base_seqs, arm_seqs, spans = _sequences(tokenizer, None, items)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scores = _score(
        model,
        base_seqs,
        arm_seqs,
        spans,
        pad_id=pad or 0,
        batch_size=batch_size,
        update=lambda _: None,
        arm=arm,
        tokenizer=tokenizer,
        base_cache=base_cache,
    )
    kls = [s["kl"] for s in scores]
    low, high = _interval(kls)
    return {"kl": fmean(kls), "kl_ci_low": low, "kl_ci_high": high}


def _check_context(lm: Any, prompts: Any, items: list[dict[str, Any]], pairs: list[Any]) -> None:
    """Refuse a prompt whose arm or base sequence is longer than the model's context."""
    limit = getattr(lm.config, "max_position_embeddings", None) or float("inf")
    if too_long := [it["id"] for it, pair in zip(items, pairs) if max(map(len, pair)) > limit]:
        raise InputError(f"{prompts}: items {too_long}: longer than the model's context ({limit})")


def _write(
    out: Path, records: list[dict[str, Any]], config: dict[str, Any], start: float
) -> dict[str, Any]:
    """Write ``records.jsonl`` and ``summary.json`` (the means over prompts, the KL's interval),
    each atomically; return the summary."""
    from scd.eval.records import dump_record

    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(out / "records.jsonl") as tmp:
        tmp.write_text("".join(dump_record(r) + "\n" for r in records), encoding="utf-8")
    mean = {k: fmean(r[k] for r in records) for k in ("kl", "logp_arm", "logp_base")}
    low, high = _interval([r["kl"] for r in records])
    summary = {
        **config,
        "n_prompts": len(records),
        "n_tokens": sum(r["n_tokens"] for r in records),
        "kl_mean": mean["kl"],
        "kl_ci_low": low,
        "kl_ci_high": high,
        "logp_arm": mean["logp_arm"],
        "logp_base": mean["logp_base"],
        "logp_delta": mean["logp_arm"] - mean["logp_base"],
        "seconds": round(time.perf_counter() - start, 3),
    }
    write_json(out / "summary.json", summary)
    return summary


def _records(
    model: str,
    items: list[dict[str, str]],
    config: dict[str, Any],
    *,
    adapter: str | None,
    arm: Any,
    prompts: Path | str,
    device: str,
    batch_size: int,
    progress: bool,
) -> list[dict[str, Any]]:
    """Each neutral prompt's record: its id, topic and response length, and the arm's and the
    base model's log-probabilities of the response and their KL (:func:`_score`)."""
    from scd.models import resolve_model
    from scd.models.formatting import load_tokenizer
    from scd.progress import Progress

    model_dir = resolve_model(model, say=print if progress else (lambda _: None))
    tokenizer = load_tokenizer(model_dir, adapter)
    base_seqs, arm_seqs, spans = _sequences(tokenizer, config["system_prompt"], items)
    lm = _load(model_dir, adapter, device, config["dtype"])
    if arm is not None:
        from scd.models import model_fingerprint

        arm.check_fits(lm, model_fingerprint(model_dir))
    _check_context(lm, prompts, items, [*zip(arm_seqs, base_seqs)])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    bar = Progress("capability KL", len(items), unit="prompt", enabled=progress)
    scores = _score(
        lm,
        base_seqs,
        arm_seqs,
        spans,
        pad_id=pad or 0,
        batch_size=batch_size,
        update=bar.update,
        arm=arm,
        tokenizer=tokenizer,
    )
    bar.close()
    return [
        {"id": it["id"], "topic": it["topic"], "n_tokens": n, **s}
        for it, n, s in zip(items, spans, scores)
    ]


def _arm(steer: str | None, erase: str | None) -> Any:
    """The steering directory or eraser directory read back, or None."""
    from scd.eval.erasure import load_erasure
    from scd.eval.steering import load_steering

    return load_steering(steer) if steer else load_erasure(erase) if erase else None


def kl_from_base(
    model: str,
    out: Path | str,
    *,
    adapter: str | None = None,
    system_prompt: str | None = None,
    steer: str | None = None,
    erase: str | None = None,
    prompts: Path | str | None = None,
    batch_size: int = 8,
    device: str | None = None,
    dtype: str = "auto",
    progress: bool = False,
) -> dict[str, Any]:
    """Drift of an arm from its base model on neutral prompts (see the module doc).

    Args:
        model: the base model (a directory, Hub id, GGUF file or catalog name).
        out: output directory: ``records.jsonl`` (one line per prompt: id, topic, n_tokens, kl,
            logp_arm, logp_base) and ``summary.json``, each written atomically.
        adapter: a PEFT adapter directory (loaded unmerged), or None.
        system_prompt: the arm's system prompt, or None.
        steer, erase: a steering directory (:mod:`scd.eval.steering`) the arm adds, or an
            eraser directory (:mod:`scd.eval.erasure`) it applies, or None.
        prompts: the neutral prompt set (default: the packaged :data:`NEUTRAL_PROMPTS`).
        batch_size: prompts per forward pass (results do not depend on it).
        device: ``cpu``, ``cuda``, ``cuda:1`` (default: cuda if available).
        dtype: weights' dtype; ``auto``: bfloat16 on CUDA, float32 elsewhere.
        progress: report progress on stderr.

    Returns:
        The summary: ``kind`` (``capability_kl``), model, adapter, system_prompt, prompts (+
        sha256, source), n_prompts, n_tokens, kl_mean, kl_ci_low, kl_ci_high (None for one
        prompt), logp_arm, logp_base, logp_delta (nats/token), dtype, device, batch_size,
        seconds. An ``out`` holding this configuration's summary returns it, loading nothing.

    Raises:
        InputError: the prompt set is missing or malformed (nothing is written), ``out`` holds
            another configuration, the adapter, model, vector or eraser cannot be loaded, or a
            sequence is longer than the model's context.
    """
    import torch

    from scd.config.engine import resolve_dtype
    from scd.eval.engines import require_adapter

    start = time.perf_counter()
    out = Path(out)
    if batch_size < 1:
        raise InputError("expected a positive number", key="batch_size", value=batch_size)
    prompts = data_path(NEUTRAL_PROMPTS) if prompts is None else prompts
    source, items = load_neutral_prompts(prompts)
    require_adapter(adapter)
    arm = _arm(steer, erase)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = {
        "kind": KIND_KL,
        "model": model,
        "adapter": adapter,
        "system_prompt": system_prompt,
        "steer": None if steer is None else arm.digest(),
        **({} if erase is None else {"erase": arm.digest()}),
        "prompts_sha256": sha256_file(prompts),
        "dtype": resolve_dtype(dtype, device),
    }
    if (out / "summary.json").is_file():  # finished before: the same configuration, or refuse
        return same_config(read_json(out / "summary.json"), config, out)

    where = {"prompts": prompts, "device": device, "batch_size": batch_size}
    records = _records(model, items, config, adapter=adapter, arm=arm, progress=progress, **where)
    ran = {"prompts": str(prompts), "source": source, "device": device, "batch_size": batch_size}
    return _write(out, records, {**config, **ran}, start)
