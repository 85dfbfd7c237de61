"""Drift on neutral text: the KL divergence of an arm from its base model (see
:mod:`scd.eval.capability`)."""

from __future__ import annotations

import time
from pathlib import Path
from statistics import fmean
from typing import Any

from scd.data_gen import data_path
from scd.errors import InputError
from scd.eval.capability.kl_scores import load_arm, reply_sequences, score_replies
from scd.eval.capability.neutral import NEUTRAL_PROMPTS, load_neutral_prompts
from scd.io import atomic_file, read_json, sha256_file, write_json

__all__ = ["KIND_KL", "kl_from_base", "kl_in_memory", "same_config"]

KIND_KL = "capability_kl"  # summary.json's kind
N_RESAMPLES, SEED = 10_000, 0  # the bootstrap over prompts


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
    base_seqs, arm_seqs, spans = reply_sequences(tokenizer, None, items)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scores = score_replies(
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
    base model's log-probabilities of the response and their KL
    (:func:`~scd.eval.capability.kl_scores.score_replies`)."""
    from scd.models import resolve_model
    from scd.models.formatting import load_tokenizer
    from scd.progress import Progress

    model_dir = resolve_model(model, say=print if progress else (lambda _: None))
    tokenizer = load_tokenizer(model_dir, adapter)
    base_seqs, arm_seqs, spans = reply_sequences(tokenizer, config["system_prompt"], items)
    lm = load_arm(model_dir, adapter, device, config["dtype"])
    if arm is not None:
        from scd.models import model_fingerprint

        arm.check_fits(lm, model_fingerprint(model_dir))
    _check_context(lm, prompts, items, [*zip(arm_seqs, base_seqs)])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    bar = Progress("capability KL", len(items), unit="prompt", enabled=progress)
    scores = score_replies(
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
