"""What tuning cost a model: capability retention of one arm (base, base + system prompt, LoRA).

**Drift on neutral text** (:func:`kl_from_base`). Each item of a neutral prompt set (instructions
naming no social group, each with a reference reply; default: the packaged
``neutral_prompts.yaml``) is formatted by scd's :class:`~scd.models.formatting.Formatter`, so the
text is what scd scores and trains. The reference reply is teacher-forced after the base prompt
(no system prompt) and after the arm's prompt (its system prompt, if any). Reply tokens are all
the chat template renders after the prompt when the reply is the assistant's turn -- the reply
and the template's end-of-turn (``</s>``, ``<|eot_id|>``, ``<|im_end|>\\n``), the tokens training
puts its loss on -- taken once from the base rendering, so both sequences end in the same ids.
At every reply position, D_KL(p_arm || p_base) over the full vocabulary (float32); its mean over
the reply is one value per prompt, reported as a mean over prompts with a 95% percentile
bootstrap interval over prompts; also the reply's mean log-likelihood (nats/token) under arm and
base, and their difference. The base distribution is the same model with its adapter switched
off (PEFT's ``disable_adapter``, no second copy); the base arm is 0.0 exactly (one pass).

**Benchmarks** (:func:`lm_eval_scores`): lm-evaluation-harness scores the arm with its own HF
model (the adapter unmerged, the system prompt as its system instruction, the chat template when
the tokenizer has one).

Both stages are resumable: an output directory holding a finished result of the same
configuration returns it without loading the model; one of another configuration is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from statistics import fmean
from typing import Any

from scd.data_gen import data_path
from scd.errors import InputError, first_line
from scd.io import atomic_file, read_json, read_yaml, sha256_file, write_json

__all__ = [
    "KIND_KL", "KIND_LM_EVAL", "NEUTRAL_PROMPTS", "kl_from_base", "kl_in_memory",
    "lm_eval_scores", "load_neutral_prompts",
]  # fmt: skip

KIND_KL, KIND_LM_EVAL = "capability_kl", "capability_lm_eval"  # summary.json / scd_config kinds
NEUTRAL_PROMPTS = "neutral_prompts.yaml"  # packaged in scd/data_gen/data
ITEM_KEYS = ("id", "topic", "instruction", "response")
N_RESAMPLES, SEED = 10_000, 0  # the bootstrap over prompts
Seqs = list[list[int]]


# -- the neutral prompt set ------------------------------------------------------------------
def load_neutral_prompts(path: Path | str | None = None) -> tuple[str, list[dict[str, str]]]:
    """The ``source`` string and the items of a neutral prompt set.

    Args:
        path: a YAML file ``{source: str, items: [{id, topic, instruction, response}, ...]}``
            (default: the packaged :data:`NEUTRAL_PROMPTS`).

    Raises:
        InputError: naming the file and the key: it cannot be read or parsed, a key is missing
            or not a non-empty string, or an id repeats.
    """
    path = data_path(NEUTRAL_PROMPTS) if path is None else path
    data = read_yaml(path)

    def bad(key: str, detail: str) -> InputError:
        return InputError(f"{path}: {key}: {detail}")

    if not isinstance(data, dict):
        raise bad("(top level)", "expected a mapping with 'source' and 'items'")
    if not isinstance(data.get("source"), str) or not data["source"].strip():
        raise bad("source", "expected a non-empty string")
    if not isinstance(items := data.get("items"), list) or not items:
        raise bad("items", "expected a non-empty list")
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise bad(f"items[{i}]", "expected a mapping with " + ", ".join(ITEM_KEYS))
        for key in ITEM_KEYS:
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise bad(f"items[{i}].{key}", "expected a non-empty string")
        if item["id"] in seen:
            raise bad(f"items[{i}].id", f"{item['id']!r} repeats")
        seen.add(item["id"])
    return data["source"], [{k: item[k] for k in ITEM_KEYS} for item in items]


# -- token sequences -------------------------------------------------------------------------
def _reply_ids(fmt: Any, user: str, reply: str, prompt_ids: list[int], item_id: str) -> list[int]:
    """The tokens the template renders after the prompt when ``reply`` is the assistant's turn."""
    _, full_text = fmt.exchange_texts(user, reply)
    full_ids = fmt.tokenizer(full_text, add_special_tokens=not fmt.chat)["input_ids"]
    n = len(prompt_ids)
    if list(full_ids[:n]) != list(prompt_ids) or len(full_ids) == n:
        raise InputError(f"neutral prompt {item_id}: the chat template renders the prompt "
                         "differently when a reply follows it (or renders no reply); the reply "
                         "cannot be teacher-forced")  # fmt: skip
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

    from scd.eval.engines.hf import load_model

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("no CUDA GPU is available here", key="device", value=device)
    lm = load_model(model_dir, device, dtype)
    if adapter is None:
        return lm
    from peft import PeftModel

    try:
        lm = PeftModel.from_pretrained(lm, adapter)
    except (RuntimeError, ValueError, KeyError) as err:
        raise InputError(f"does not fit the model {model_dir} ({first_line(err)})",
                         key="adapter", value=adapter) from None  # fmt: skip
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
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                   position_ids=positions.to(device), logits_to_keep=span + 1,
                   ).logits[:, :-1]  # position t predicts token t + 1: drop the last  # fmt: skip
    out = torch.log_softmax(logits.float(), dim=-1)
    # row i's reply occupies its last spans[i] tokens: predicted by the last spans[i] kept rows
    index = torch.stack([torch.arange(span) + span - s for s in spans]).clamp(max=span - 1)
    return out.gather(1, index.to(out.device)[..., None].expand(-1, -1, out.shape[-1]))


def _score(model: Any, base_seqs: Seqs, arm_seqs: Seqs, spans: list[int],
           *, pad_id: int, batch_size: int, arm_differs: bool,
           update: Callable[[int], None]) -> list[dict[str, float]]:  # fmt: skip
    """Per prompt: mean KL(arm || base) over reply positions and both mean log-likelihoods."""
    import contextlib

    import torch
    import torch.nn.functional as F
    from peft import PeftModel

    # the base: the same model with its adapter layers off
    base_ctx = model.disable_adapter if isinstance(model, PeftModel) else contextlib.nullcontext
    order = sorted(range(len(spans)), key=lambda i: -len(arm_seqs[i]))
    results: list[Any] = [None] * len(spans)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            sub = [spans[i] for i in batch]
            with base_ctx():
                base = _reply_logprobs(model, [base_seqs[i] for i in batch], sub, pad_id)
            arm = base
            if arm_differs:
                arm = _reply_logprobs(model, [arm_seqs[i] for i in batch], sub, pad_id)
            for j, i in enumerate(batch):
                n = spans[i]
                targets = torch.tensor(base_seqs[i][-n:], device=base.device)[:, None]
                lp_base, lp_arm = base[j, :n], arm[j, :n]
                kl = 0.0  # the base arm: the same distribution, exactly
                if arm_differs:  # D_KL(p_arm || p_base) per position; rounding can dip below 0
                    kl = F.kl_div(lp_base, lp_arm, reduction="none", log_target=True).sum(-1)
                    kl = kl.clamp(min=0).mean().item()
                results[i] = {"kl": kl, "logp_arm": lp_arm.gather(1, targets).mean().item(),
                              "logp_base": lp_base.gather(1, targets).mean().item()}  # fmt: skip
            update(len(batch))
    return results


def _interval(values: list[float]) -> tuple[float | None, float | None]:
    """95% percentile bootstrap interval of the mean over prompts (fixed seed); None for < 2."""
    if len(values) < 2:
        return None, None
    import numpy as np
    from scipy import stats

    ci = stats.bootstrap((np.asarray(values),), np.mean, n_resamples=N_RESAMPLES,
                         method="percentile", rng=SEED).confidence_interval  # fmt: skip
    return float(ci.low), float(ci.high)


def _same_config(old: Any, config: dict[str, Any], out: Path) -> Any:
    """``old``, a finished result in ``out``; refused if it has another configuration."""
    if differ := [k for k in config if not isinstance(old, dict) or old.get(k) != config[k]]:
        raise InputError(f"holds a capability result of another configuration "
                         f"({', '.join(differ)} differ); choose another out (or remove it)",
                         key="out", value=out)  # fmt: skip
    return old


def kl_in_memory(
    model: Any, tokenizer: Any, items: list[dict[str, str]], batch_size: int = 8
) -> dict[str, float | None]:
    """The drift of a PEFT model already in memory -- one being trained -- from its base on the
    neutral ``items``, as :func:`kl_from_base` measures it (its adapter switched off for the
    base): the mean KL per prompt over prompts (nats/token) and its 95% bootstrap interval."""
    base_seqs, arm_seqs, spans = _sequences(tokenizer, None, items)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scores = _score(model, base_seqs, arm_seqs, spans, pad_id=pad or 0, batch_size=batch_size,
                    arm_differs=True, update=lambda _: None)  # fmt: skip
    kls = [s["kl"] for s in scores]
    low, high = _interval(kls)
    return {"kl": fmean(kls), "kl_ci_low": low, "kl_ci_high": high}


def kl_from_base(model: str, out: Path | str, *, adapter: str | None = None,
                 system_prompt: str | None = None, prompts: Path | str | None = None,
                 batch_size: int = 8, device: str | None = None, dtype: str = "auto",
                 progress: bool = False) -> dict[str, Any]:  # fmt: skip
    """Drift of an arm from its base model on neutral prompts (see the module doc).

    Args:
        model: the base model (a directory, Hub id, GGUF file or catalog name).
        out: output directory: ``records.jsonl`` (one line per prompt: id, topic, n_tokens, kl,
            logp_arm, logp_base) and ``summary.json``, each written atomically.
        adapter: a PEFT adapter directory (loaded unmerged), or None.
        system_prompt: the arm's system prompt, or None.
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
            another configuration, the adapter or model cannot be loaded, or a sequence is
            longer than the model's context.
    """
    import torch

    from scd.config.engine import resolve_dtype
    from scd.eval.engines import require_adapter
    from scd.eval.records import dump_record
    from scd.progress import Progress

    start = time.perf_counter()
    out = Path(out)
    if batch_size < 1:
        raise InputError("expected a positive number", key="batch_size", value=batch_size)
    prompts = data_path(NEUTRAL_PROMPTS) if prompts is None else prompts
    source, items = load_neutral_prompts(prompts)
    require_adapter(adapter)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = {"kind": KIND_KL, "model": model, "adapter": adapter, "system_prompt": system_prompt,
              "prompts_sha256": sha256_file(prompts),
              "dtype": resolve_dtype(dtype, device)}  # fmt: skip
    if (out / "summary.json").is_file():  # finished before: the same configuration, or refuse
        return _same_config(read_json(out / "summary.json"), config, out)

    from scd.models import resolve_model
    from scd.models.formatting import load_tokenizer

    model_dir = resolve_model(model, say=print if progress else (lambda _: None))
    tokenizer = load_tokenizer(model_dir, adapter)
    base_seqs, arm_seqs, spans = _sequences(tokenizer, system_prompt, items)
    lm = _load(model_dir, adapter, device, config["dtype"])
    limit = getattr(lm.config, "max_position_embeddings", None) or float("inf")
    if too_long := [it["id"] for it, a, b in zip(items, arm_seqs, base_seqs)
                    if max(len(a), len(b)) > limit]:  # fmt: skip
        raise InputError(f"{prompts}: items {too_long}: longer than the model's context ({limit})")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    bar = Progress("capability KL", len(items), unit="prompt", enabled=progress)
    scores = _score(lm, base_seqs, arm_seqs, spans, pad_id=pad or 0, batch_size=batch_size,
                    arm_differs=bool(adapter or system_prompt), update=bar.update)  # fmt: skip
    bar.close()

    records = [{"id": it["id"], "topic": it["topic"], "n_tokens": n, **s}
               for it, n, s in zip(items, spans, scores)]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(out / "records.jsonl") as tmp:
        tmp.write_text("".join(dump_record(r) + "\n" for r in records), encoding="utf-8")
    mean = {k: fmean(r[k] for r in records) for k in ("kl", "logp_arm", "logp_base")}
    low, high = _interval([r["kl"] for r in records])
    summary = {**config, "prompts": str(prompts), "source": source, "n_prompts": len(records),
               "n_tokens": sum(spans), "kl_mean": mean["kl"], "kl_ci_low": low, "kl_ci_high": high,
               "logp_arm": mean["logp_arm"], "logp_base": mean["logp_base"],
               "logp_delta": mean["logp_arm"] - mean["logp_base"], "device": device,
               "batch_size": batch_size,
               "seconds": round(time.perf_counter() - start, 3)}  # fmt: skip
    write_json(out / "summary.json", summary)
    return summary


# -- lm-evaluation-harness -------------------------------------------------------------------
def _tree_sha256(path: str | None) -> str | None:
    """A digest of every file under ``path`` (names and bytes), or None."""
    if path is None:
        return None
    digest, root = hashlib.sha256(), Path(path)
    for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{f.relative_to(root).as_posix()}\n".encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def _flat(results: dict[str, Any]) -> dict[str, float]:
    """``{"<task>/<metric>": value}`` of lm-eval's numeric, finite metrics; the ``none`` filter
    is dropped from the name (``acc,none`` -> ``acc``, ``acc_stderr,none`` -> ``acc_stderr``),
    other filters stay (``exact_match,strict-match``)."""
    flat = {}
    for task, metrics in results.get("results", {}).items():
        for key, value in metrics.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and math.isfinite(value):  # not lm-eval's "N/A" or NaN stderr
                metric, _, filt = key.partition(",")
                flat[f"{task}/{metric if filt in ('', 'none') else key}"] = value
    return flat


def lm_eval_scores(model: str, out: Path | str, *, tasks: list[str], adapter: str | None = None,
                   system_prompt: str | None = None, include_path: str | None = None,
                   limit: int | None = None, batch_size: int = 8, device: str = "cpu",
                   dtype: str = "auto") -> dict[str, float]:  # fmt: skip
    """Score an arm on lm-evaluation-harness tasks (lm-eval's own HF model and metrics).

    Args:
        model: the base model (a directory, Hub id, GGUF file or catalog name).
        out: output directory: ``lm_eval_results.json`` (lm-eval's results dict, JSON-safe, with
            this configuration as ``scd_config``) and ``lm_eval.json`` (the flat metrics).
        tasks: lm-eval task (or group) names.
        adapter: a PEFT adapter directory (lm-eval loads it unmerged), or None.
        system_prompt: given to lm-eval as its ``system_instruction``.
        include_path: a directory of extra task YAMLs (``--include_path``).
        limit: at most this many documents per task.
        batch_size, device: lm-eval's (``cpu``, ``cuda``, ...).
        dtype: weights' dtype; ``auto``: bfloat16 on CUDA, float32 elsewhere.

    Returns:
        ``{"<task>/<metric>": value}`` for lm-eval's numeric metrics (standard errors as
        ``<task>/<metric>_stderr``). An ``out`` holding this configuration's result returns it.

    Raises:
        InputError: an unknown task (naming ``capability.lm_eval_tasks``), a bad adapter, or
            ``out`` holding another configuration.
    """
    from scd.config.engine import resolve_dtype
    from scd.eval.engines import require_adapter

    out, tasks = Path(out), list(tasks)
    if not tasks:
        raise InputError("capability.lm_eval_tasks: expected at least one lm-eval task")
    require_adapter(adapter)
    config = {"kind": KIND_LM_EVAL, "model": model, "adapter": adapter,
              "system_prompt": system_prompt, "tasks": tasks, "include_path": include_path,
              "include_sha256": _tree_sha256(include_path), "limit": limit,
              "dtype": resolve_dtype(dtype, device)}  # fmt: skip
    results_path, flat_path = out / "lm_eval_results.json", out / "lm_eval.json"
    if flat_path.is_file() and results_path.is_file():
        old = read_json(results_path)
        _same_config(old.get("scd_config") if isinstance(old, dict) else None, config, out)
        return read_json(flat_path)

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import handle_non_serializable

    from scd.models import resolve_model

    manager = TaskManager(include_path=include_path)
    if unknown := [t for t in tasks if t not in manager.all_tasks]:
        where = f" or those under {include_path}" if include_path else ""
        raise InputError(f"capability.lm_eval_tasks: unknown lm-eval task {unknown[0]!r} (not "
                         f"among lm-eval's tasks{where})")  # fmt: skip
    lm = HFLM(pretrained=resolve_model(model, say=lambda _: None), peft=adapter,
              dtype=config["dtype"], device=device, batch_size=batch_size,
              trust_remote_code=False, enable_thinking=False)  # fmt: skip
    chat = bool(getattr(lm.tokenizer, "chat_template", None))
    results = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, limit=limit,
                                      system_instruction=system_prompt, apply_chat_template=chat,
                                      log_samples=False)  # fmt: skip
    safe = json.loads(json.dumps(results or {}, default=handle_non_serializable))
    write_json(results_path, {"scd_config": config, **safe})
    write_json(flat_path, flat := _flat(safe))  # written last: the stage's "finished" mark
    return flat
