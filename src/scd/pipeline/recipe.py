"""Recipes as ``scd train`` and ``scd run`` read them: the schema with every registered
benchmark's ``eval.<name>`` section, the paths checked before any work, and errors said in the
recipe's terms (the key and the stage, not a command-line flag)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import scd.train.arms  # noqa: F401  (registers the arms and methods: a recipe takes their keys)
from scd.config import loader
from scd.config.schema import DataSpec, Recipe
from scd.errors import InputError
from scd.eval.benchmarks import REGISTRY, recipe_sections
from scd.eval.engines import engine_of

__all__ = ["in_recipe_terms", "load_recipe", "recipe_from_dict", "validate_inputs"]


def load_recipe(
    path: Path | str, overrides: list[str] | None = None, say: loader.Say | None = None
) -> Recipe:
    """Read, override (``key=value`` items) and check a recipe file; ``say`` gets the notices
    of renamed keys (default: a ``FutureWarning``).

    Raises:
        InputError: every problem, one line each naming the file (or ``--set``) and the key.
    """
    return loader.parse_recipe_file(path, overrides, sections=recipe_sections(), say=say)


def recipe_from_dict(
    data: dict[str, Any], source: str = "recipe", overrides: list[str] | None = None
) -> Recipe:
    """:func:`load_recipe` for a recipe given as a mapping (``source`` names it in errors)."""
    return loader.parse_recipe_dict(data, source, sections=recipe_sections(), overrides=overrides)


def recipe_key(key: str, section: str | None) -> str:
    """The recipe key an option of the library (a parameter name) comes from, given the recipe
    section of the stage that raised it; its own name when the recipe has none."""
    if engine_of(key):
        return f"eval.{key}"
    if section and section.startswith("eval."):
        return f"{section}.{key}"
    if key in {f.name for f in dataclasses.fields(DataSpec)}:
        return f"data.{key}"
    return {"base": "model"}.get(key, key)


def in_recipe_terms(err: InputError, stage: str | None, section: str | None = None) -> InputError:
    """``err`` as ``scd run`` reports it: the stage, and the recipe key instead of a flag."""
    if not err.key:
        text = str(err)
    elif err.key == "system_prompt" and stage and "/arm-prompt/" in stage:
        text = err.render("arena.system_prompt")  # the prompt arm's system message, not eval's
    else:
        text = err.render(recipe_key(err.key, section))
    return InputError(f"stage {stage}: {text}" if stage else text)


def _check_prompts(key: str, path: Path) -> None:
    """A prompt set's file: parquet, with the columns of ``scd generate contact``."""
    import pyarrow.parquet as pq

    from scd.config.vocabulary import PROMPT_COLUMNS

    try:
        columns = set(pq.read_schema(path).names)
    except Exception:  # pyarrow raises several types for a file that is not parquet
        raise InputError(
            f"{key}: {path} is not a parquet file (run `scd generate contact`)"
        ) from None
    missing = [c for c in PROMPT_COLUMNS if c not in columns]
    if missing:
        raise InputError(
            f"{key}: {path} has no column {missing[0]!r} (not `scd generate contact`'s)"
        )


def _check_data(recipe: Recipe) -> None:
    """The data the recipe names, read now: its descriptors (a known set or a file), its general
    instructions (scd's own set or a local file: there, not empty, the columns it needs) and its
    lm-evaluation-harness tasks (known to lm-eval)."""
    from scd.data_gen.descriptors import resolve_descriptors
    from scd.data_gen.general import load_general
    from scd.io import looks_local

    d, c = recipe.data, recipe.capability
    if d.descriptors:
        resolve_descriptors(d.descriptors, version=d.hb_version)
    general = d.general or ""
    if general.startswith("scd:") or looks_local(general) or Path(general).suffix:
        load_general(general, 1, d.seed)
    elif general:  # a Hub dataset id: asked for once now, loaded by its stage
        from scd.hub import require_hub_dataset

        require_hub_dataset(general, key="data.general")
    if c.neutral_prompts:  # read whole now, not first by the capability stage after training
        from scd.eval.capability.neutral import load_neutral_prompts

        load_neutral_prompts(Path(c.neutral_prompts).expanduser())
    if c.lm_eval_tasks:
        from lm_eval.tasks import TaskManager

        known = TaskManager(include_path=c.lm_eval_include_path).all_tasks
        for task in c.lm_eval_tasks:
            if task not in known:
                raise InputError(
                    "not a task lm-evaluation-harness knows (a task of your own: "
                    "capability.lm_eval_include_path)",
                    key="capability.lm_eval_tasks",
                    value=task,
                )


def validate_inputs(recipe: Recipe) -> None:
    """Check every path the recipe names before any stage runs (the benchmarks' own inputs are
    checked with the recipe).

    Raises:
        InputError: naming the first key whose file or directory is missing.
    """
    d = recipe.data
    if d.sft:
        raise InputError(
            "data.sft: scd run generates its SFT data per setting; give "
            "data.descriptors or data.prompts instead"
        )
    for key, value in {"data.prompts": d.prompts, "data.eval_prompts": d.eval_prompts}.items():
        if value and not (Path(value) / "prompts.parquet").is_file():
            raise InputError(f"{key}: {value} has no prompts.parquet (run `scd generate contact`)")
        if value:
            _check_prompts(key, Path(value) / "prompts.parquet")
    if recipe.train.push_to_hub:  # the adapters go to the Hub once evaluated
        from scd.hub import hub_token

        hub_token(key="train.push_to_hub")
    if recipe.model != "toy":
        from scd.models import check_model_available

        check_model_available(recipe.model, key="model")  # a Hub id: cached or on the Hub
    try:
        _check_data(recipe)
    except InputError as err:
        raise in_recipe_terms(err, None) from None
    for name, bench in REGISTRY.items():
        options = getattr(recipe.eval, name, None)
        if options is not None and options.enabled:  # a dataset's files fetched now, not later
            bench.check_inputs(bench.with_data(options, say=print))
