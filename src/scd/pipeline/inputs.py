"""What a run reads from its recipe: every path checked before any work, and errors said in the
recipe's terms (the key and the stage, not a command-line flag)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scd.errors import InputError
from scd.options import EngineSpec
from scd.train.recipe import DataSpec, Recipe

__all__ = ["in_recipe_terms", "validate_inputs"]


def _recipe_key(key: str, stage: str | None) -> str:
    """The recipe key an option of the library (a parameter name) comes from in ``scd run``;
    its own name when the recipe has none (an adapter or output directory of the run)."""
    stage = stage or ""
    if key in {f.name for f in dataclasses.fields(EngineSpec)}:
        return f"eval.{key}"
    if key in ("data", "categories") or (key == "limit" and "bbq" in stage):
        return f"eval.bbq.{key}"
    if key == "limit":
        return "eval.bias.limit"
    if key == "seed":
        return "eval.seed" if "eval" in stage or stage.startswith("base") else "data.seed"
    if key in {f.name for f in dataclasses.fields(DataSpec)}:
        return f"data.{key}"
    return {"base": "model", "limit_conditions": "eval.stigma.limit_conditions"}.get(key, key)


def in_recipe_terms(err: InputError, stage: str | None) -> InputError:
    """``err`` as ``scd run`` reports it: the stage, and the recipe key instead of a flag."""
    text = err.render(_recipe_key(err.key, stage)) if err.key else str(err)
    return InputError(f"stage {stage}: {text}" if stage else text)


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return (
        len(parts) == 2 and all(parts) and not text.startswith((".", "~")) and "." not in parts[1]
    )


def validate_inputs(recipe: Recipe) -> None:
    """Check every path the recipe names before any stage runs.

    Raises:
        InputError: naming the first key whose file or directory is missing.
    """
    d, ev = recipe.data, recipe.eval
    if d.sft:
        raise InputError(
            "data.sft: scd run generates its SFT data per setting; give data.descriptors "
            "or data.prompts instead"
        )
    paths = {"data.prompts": d.prompts, "data.eval_prompts": d.eval_prompts}
    for key, value in paths.items():
        if value and not (Path(value) / "prompts.parquet").is_file():
            raise InputError(f"{key}: {value} has no prompts.parquet (run `scd generate contact`)")
    if recipe.model != "toy":
        from scd.models import check_model_spec

        check_model_spec(recipe.model, key="model")
    if ev.bbq.enabled and not Path(ev.bbq.data).exists() and not _looks_like_hub_id(ev.bbq.data):
        raise InputError(f"eval.bbq.data: {ev.bbq.data} is neither an existing path nor a Hub id")
