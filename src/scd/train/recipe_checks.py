"""The checks of a well-typed recipe (:mod:`scd.train.recipe`): values, ranges that would hang or
crash deep inside training, and the keys only ``scd run`` reads. Every problem is reported at
once, one line each naming the file and key."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scd.errors import InputError
from scd.eval.engines.vllm import LORA_RANKS as VLLM_LORA_RANKS
from scd.options import Options, field_problems

if TYPE_CHECKING:
    from scd.train.recipe import Recipe

__all__ = ["recipe_problems"]


def recipe_problems(recipe: Recipe, source: str) -> list[str]:
    """Every problem of ``recipe`` (read from ``source``), in key order, without repeats."""
    found = [*_field_problems(recipe, "", source), *_value_problems(recipe, source),
             *_run_problems(recipe, source)]  # fmt: skip
    return list(dict.fromkeys(found))


def _field_problems(section: Any, prefix: str, source: str) -> Iterator[str]:
    """Each field's own check (:func:`scd.options.field_problems`), section by section; the
    engine keys also refuse an option of the other backend."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            yield from _field_problems(value, f"{prefix}{f.name}.", source)
    found = section.problems() if isinstance(section, Options) else field_problems(section)
    for key, problem in found:
        yield f"{source}: {prefix}{key}: {problem}"


def _value_problems(recipe: Recipe, source: str) -> Iterator[str]:
    if recipe.lora.r not in VLLM_LORA_RANKS:
        yield (
            f"{source}: lora.r: {recipe.lora.r} is not a rank vLLM can serve "
            f"({', '.join(map(str, VLLM_LORA_RANKS))})"
        )
    if (
        sum(x is not None for x in (recipe.data.sft, recipe.data.prompts, recipe.data.descriptors))
        != 1
    ):
        yield f"{source}: data: give exactly one of sft, prompts, descriptors"
    t = recipe.train
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
    if ev.bbq.enabled and not ev.bbq.data:
        yield (
            f"{source}: eval.bbq.data: needed with eval.bbq.enabled (the data/ directory of "
            "github.com/nyu-mll/BBQ, or a Hub dataset id with BBQ's original schema)"
        )
    settings = recipe.run.settings if recipe.run.settings is not None else [recipe.data.setting]
    for n in [recipe.data.setting, *settings] if known is not None else []:
        if n not in known:
            yield f"{source}: setting {n}: expected one of {known}"
    if not settings or len(set(settings)) != len(settings):
        yield f"{source}: run.settings: expected distinct settings, got {settings}"
    if recipe.run.name is not None and not re.fullmatch(r"[A-Za-z0-9][\w.-]*", recipe.run.name):
        yield f"{source}: run.name: {recipe.run.name!r} is not a plain directory name"
