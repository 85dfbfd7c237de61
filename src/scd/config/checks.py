"""The checks of a well-typed recipe (:mod:`scd.config.schema`): each field's own check, values
that would hang or crash deep inside training, and the keys only ``scd run`` reads -- so that a
run never fails late. Each problem is ``(key, what is wrong)``; the loader reports them all."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scd.config.arms import arm_class, arm_names, padding_free_problem
from scd.config.options import Options, field_problems
from scd.config.schema import CapabilitySpec, Recipe
from scd.config.settings import load_settings
from scd.errors import InputError

__all__ = ["liger_problem", "recipe_problems", "recipe_warnings"]

Problem = tuple[str, str]


def recipe_problems(recipe: Recipe) -> list[Problem]:
    """Every problem of ``recipe``, in key order (the loader drops repeats)."""
    return [*_field_problems(recipe, ""), *_value_problems(recipe), *_run_problems(recipe)]


def _field_problems(section: Any, prefix: str) -> Iterator[Problem]:
    """Each field's own check, section by section (an :class:`Options` section checks itself:
    the engine keys refuse an option of the other backend, a benchmark its own combinations)."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            yield from _field_problems(value, f"{prefix}{f.name}.")
    found = section.problems() if isinstance(section, Options) else field_problems(section)
    for key, problem in found:
        yield prefix + key, f"{prefix}{key}: {problem}"


def _value_problems(recipe: Recipe) -> Iterator[Problem]:
    top = recipe.eval.max_lora_rank  # the engine evaluates the adapters the run trains
    if top is not None and recipe.lora.r > top:
        yield (
            "lora.r",
            (
                f"lora.r: {recipe.lora.r} is above the largest rank the {recipe.eval.backend} "
                f"engine serves ({top}); evaluate with eval.backend hf"
            ),
        )
    d, t = recipe.data, recipe.train
    if sum(x is not None for x in (d.sft, d.prompts, d.descriptors)) != 1:
        yield "data", "data: give exactly one of sft, prompts, descriptors"
    if t.max_steps != -1 and t.max_steps < 1:
        yield "train.max_steps", "train.max_steps: expected -1 (epochs decide) or >= 1"
    if t.select == "best" and not t.eval_every_steps:
        yield (
            "train.select",
            ("train.select: best chooses among measured steps: set train.eval_every_steps"),
        )
    if t.max_kl is not None and t.select != "best":
        yield "train.max_kl", "train.max_kl: bounds train.select best (it is last)"
    if t.select_judgment and t.select != "best":
        yield (
            "train.select_judgment",
            "train.select_judgment: gates the steps train.select best chooses among (it is last)",
        )
    if t.push_to_hub and not t.hub_model_id:
        yield (
            "train.hub_model_id",
            (
                "train.hub_model_id: train.push_to_hub needs the Hub "
                "repository to upload to (owner/name)"
            ),
        )
    if t.hub_model_id and t.hub_model_id.count("/") != 1:
        yield (
            "train.hub_model_id",
            (f"train.hub_model_id: {t.hub_model_id!r} is not a Hub repository id (owner/name)"),
        )
    problem = liger_problem(recipe)
    if problem:
        yield "train.use_liger_kernel", problem


def liger_problem(recipe: Recipe, cuda: bool | None = None) -> str | None:
    """Why ``train.use_liger_kernel: true`` (TRL's key: Liger Kernel's fused layers) cannot
    train: the package is missing, or the run trains on a CPU, where its Triton kernels do not
    run. ``cuda``: whether the run trains on a CUDA GPU (None: not known yet; then only
    ``train.device: cpu`` says it does not)."""
    if not (recipe.train.trl or {}).get("use_liger_kernel"):
        return None
    if importlib.util.find_spec("liger_kernel") is None:
        return (
            "train.use_liger_kernel: the liger-kernel package is not installed "
            "(pip install liger-kernel)"
        )
    if cuda is False or (cuda is None and recipe.train.device == "cpu"):
        return (
            "train.use_liger_kernel: Liger Kernel's kernels run on a CUDA GPU and this run "
            "trains on the CPU; set it false"
        )
    return None


def _run_problems(recipe: Recipe) -> Iterator[Problem]:
    """The keys only ``scd run`` reads."""
    path = recipe.data.settings_file
    if path is not None and not Path(path).is_file():
        yield "data.settings_file", f"data.settings_file: {path} is not a file"
    known = None
    try:
        known = sorted(load_settings(path))
    except InputError as err:
        if path is None or Path(path).is_file():
            yield "data.settings_file", f"data.settings_file: {err}"
    settings = recipe.settings
    for n in [recipe.data.setting, *settings] if known is not None else []:
        if n not in known:
            yield "run.settings", f"setting {n}: expected one of {known}"
    if not settings or len(set(settings)) != len(settings):
        yield "run.settings", f"run.settings: expected distinct settings, got {settings}"
    yield from _arm_problems(recipe)
    general = recipe.data.general
    if general and _looks_like_path(general) and not Path(general).expanduser().is_file():
        yield "data.general", f"data.general: {general}: no such file"
    for f in dataclasses.fields(recipe.eval):  # each benchmark's section: what a run cannot use
        section = getattr(recipe.eval, f.name)
        if isinstance(section, Options):
            for key, problem in section.run_problems():
                yield f"eval.{f.name}.{key}", f"eval.{f.name}.{key}: {problem}"
    name = recipe.run.name
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        yield "run.name", f"run.name: {name!r} is not a plain directory name"


def _looks_like_path(spec: str) -> bool:
    """Whether a data source names a local file rather than a Hub dataset id."""
    return spec.startswith((".", "/", "~")) or spec.endswith((".json", ".jsonl", ".parquet"))


def _arm_problems(recipe: Recipe) -> Iterator[Problem]:
    """The arena's arms: registered names, each once, and each arm's own checks
    (:meth:`scd.train.arms.base.Arm.problems`: the data it needs, the values it cannot run
    with)."""
    arms = recipe.arms
    if arms is None:
        return
    if not arms:
        yield "arms", "arms: expected a list of arms (e.g. [base, prompt, sft, dpo])"
    known = arm_names()
    for i, arm in enumerate(arms):
        if arm not in known:
            yield "arms", (f"arms[{i}]: unknown arm {arm!r} (expected one of {', '.join(known)})")
    if len(set(arms)) != len(arms):
        yield "arms", f"arms: each arm once, got {arms}"
    for arm in dict.fromkeys(a for a in arms if a in known):
        yield from arm_class(arm)().problems(recipe)
    methods = [arm_class(a).method for a in arms if a in known]
    problem = recipe.train.padding_free and padding_free_problem(m for m in methods if m)
    if problem:
        yield "train.padding_free", problem
    c = recipe.capability
    if c.neutral_prompts and not Path(c.neutral_prompts).expanduser().is_file():
        yield (
            "capability.neutral_prompts",
            (f"capability.neutral_prompts: {c.neutral_prompts}: no such file"),
        )
    if c.lm_eval_include_path and not Path(c.lm_eval_include_path).expanduser().is_dir():
        yield (
            "capability.lm_eval_include_path",
            (f"capability.lm_eval_include_path: {c.lm_eval_include_path}: no such directory"),
        )
    if c.lm_eval_tasks and importlib.util.find_spec("lm_eval") is None:
        yield (
            "capability.lm_eval_tasks",
            (
                "capability.lm_eval_tasks: lm-evaluation-harness is "
                "not installed (pip install 'scd[lm-eval]')"
            ),
        )


def recipe_warnings(recipe: Recipe) -> list[str]:
    """What a valid recipe does that its reader may not expect (printed, not refused)."""
    t, warnings = recipe.train, []
    arena_changed = recipe.arena != type(recipe.arena)()
    if not recipe.arms and (arena_changed or recipe.capability != CapabilitySpec()):
        warnings.append(
            "arena and capability keys take effect only with arms: (the arena); "
            "this recipe lists none"
        )
    if t.lr_scheduler_type == "constant" and t.warmup_steps > 0:
        warnings.append(
            f"train.lr_scheduler_type constant ignores train.warmup_steps {t.warmup_steps} "
            "(transformers' constant schedule has no warmup; the SCD paper's code ran it so); "
            "use constant_with_warmup to warm up"
        )
    return warnings
