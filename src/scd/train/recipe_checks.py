"""The checks of a well-typed recipe (:mod:`scd.train.recipe`): values, ranges that would hang or
crash deep inside training, and the keys only ``scd run`` reads. Every problem is reported at
once, one line each naming the file and key."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from scd.errors import InputError
from scd.eval.engines.vllm import LORA_RANKS as VLLM_LORA_RANKS
from scd.options import BACKENDS, DENOMINATORS, DTYPES, one_of

if TYPE_CHECKING:
    from scd.train.recipe import Recipe

__all__ = ["recipe_problems"]


def recipe_problems(recipe: Recipe, source: str) -> list[str]:
    """Every problem of ``recipe`` (read from ``source``), in key order, without repeats."""
    found = [*_value_problems(recipe, source), *_range_problems(recipe, source),
             *_run_problems(recipe, source)]  # fmt: skip
    return list(dict.fromkeys(found))


def _value_problems(recipe: Recipe, source: str) -> Iterator[str]:
    if recipe.quantization not in ("none", "4bit"):
        yield f"{source}: quantization: expected none or 4bit"
    if recipe.lora.r not in VLLM_LORA_RANKS:
        yield (
            f"{source}: lora.r: {recipe.lora.r} is not a rank vLLM can serve "
            f"({', '.join(map(str, VLLM_LORA_RANKS))})"
        )
    if recipe.data.style not in ("short", "explained"):
        yield f"{source}: data.style: expected short or explained"
    if not 0 <= recipe.data.general_fraction < 1:
        yield f"{source}: data.general_fraction: expected 0 <= f < 1"
    if (
        sum(x is not None for x in (recipe.data.sft, recipe.data.prompts, recipe.data.descriptors))
        != 1
    ):
        yield f"{source}: data: give exactly one of sft, prompts, descriptors"
    if recipe.train.device not in ("auto", "cpu", "cuda"):
        yield f"{source}: train.device: expected auto, cpu or cuda"
    if not 0 <= recipe.train.warmup_ratio < 1:
        yield f"{source}: train.warmup_ratio: expected 0 <= ratio < 1"


def _range_problems(recipe: Recipe, source: str) -> Iterator[str]:
    """Numbers that would hang or crash deep inside training: refused up front."""
    t, lora, d = recipe.train, recipe.lora, recipe.data
    at_least_one = {
        "train.batch_size": t.batch_size, "train.grad_accum": t.grad_accum,
        "train.max_length": t.max_length, "train.logging_steps": t.logging_steps,
        "train.save_steps": t.save_steps, "train.save_total_limit": t.save_total_limit,
        "train.eval_steps": t.eval_steps, "data.max_train": d.max_train,
        "data.max_eval": d.max_eval, "lora.alpha": lora.alpha,
    }  # fmt: skip
    for key, value in at_least_one.items():
        if value is not None and value < 1:
            yield f"{source}: {key}: expected a positive number, got {value}"
    positive = {"train.learning_rate": t.learning_rate, "train.max_grad_norm": t.max_grad_norm}
    for key, value in positive.items():
        if not value > 0:
            yield f"{source}: {key}: expected a number > 0, got {value}"
    if t.weight_decay < 0:
        yield f"{source}: train.weight_decay: expected >= 0, got {t.weight_decay}"
    if not 0 <= lora.dropout < 1:
        yield f"{source}: lora.dropout: expected 0 <= p < 1, got {lora.dropout}"
    if t.max_steps != -1 and t.max_steps < 1:
        yield f"{source}: train.max_steps: expected -1 (epochs decide) or >= 1"
    if t.max_steps == -1 and not t.epochs > 0:
        yield f"{source}: train.epochs: expected > 0 (or set train.max_steps)"


def _run_problems(recipe: Recipe, source: str) -> Iterator[str]:
    """The keys only ``scd run`` reads: validated up front so that a run never fails late."""
    from scd.data_gen.settings import load_settings

    ev, path = recipe.eval, recipe.data.settings_file
    if path is not None and not Path(path).is_file():
        yield f"{source}: data.settings_file: {path} is not a file"
    known = None
    try:
        known = sorted(load_settings(path))
    except InputError as err:
        if path is None or Path(path).is_file():
            yield f"{source}: data.settings_file: {err}"
    if ev.backend not in BACKENDS:
        yield f"{source}: eval.backend: expected {one_of(BACKENDS)}, got {ev.backend!r}"
    if ev.dtype not in DTYPES:
        yield f"{source}: eval.dtype: expected {one_of(DTYPES)}"
    if ev.bias.denominator not in DENOMINATORS:
        yield f"{source}: eval.bias.denominator: expected {one_of(DENOMINATORS)}"
    backend_of = {"batch_size": "hf", "device": "hf", "tensor_parallel_size": "vllm",
                  "max_model_len": "vllm", "gpu_memory_utilization": "vllm"}  # fmt: skip
    for key, backend in backend_of.items():
        if getattr(ev, key) is not None and ev.backend != backend:
            yield (
                f"{source}: eval.{key}: an option of the {backend} backend (eval.backend is "
                f"{ev.backend}); remove it or set eval.backend: {backend}"
            )
    share = ev.gpu_memory_utilization
    if share is not None and not 0 < share <= 1:
        yield f"{source}: eval.gpu_memory_utilization: expected 0 < f <= 1, got {share}"
    if ev.device is not None and not re.fullmatch(r"cpu|mps|cuda(:\d+)?", ev.device):
        yield (f"{source}: eval.device: expected cpu, mps, cuda or cuda:N, got "
                         f"{ev.device!r}")  # fmt: skip
    positive = {
        "eval.bias.limit": ev.bias.limit,
        "eval.bbq.limit": ev.bbq.limit,
        "eval.batch_size": ev.batch_size,
        "eval.tensor_parallel_size": ev.tensor_parallel_size,
        "eval.max_model_len": ev.max_model_len,
        "eval.stigma.limit_conditions": ev.stigma.limit_conditions,
    }
    for key, value in positive.items():
        if value is not None and value < 1:
            yield f"{source}: {key}: expected a positive number, got {value}"
    if ev.bbq.enabled and not ev.bbq.data:
        yield (
            f"{source}: eval.bbq.data: needed with eval.bbq.enabled (the data/ directory of "
            "github.com/nyu-mll/BBQ, or a Hub dataset id with BBQ's original schema)"
        )
    bad = [p for p in ev.stigma.probes if p not in ("sds", "aq27")]
    if bad:
        yield f"{source}: eval.stigma.probes: {bad[0]!r} (expected sds or aq27)"
    settings = recipe.run.settings if recipe.run.settings is not None else [recipe.data.setting]
    for n in [recipe.data.setting, *settings] if known is not None else []:
        if n not in known:
            yield f"{source}: setting {n}: expected one of {known}"
    if not settings or len(set(settings)) != len(settings):
        yield f"{source}: run.settings: expected distinct settings, got {settings}"
    if recipe.run.name is not None and not re.fullmatch(r"[A-Za-z0-9][\w.-]*", recipe.run.name):
        yield f"{source}: run.name: {recipe.run.name!r} is not a plain directory name"
