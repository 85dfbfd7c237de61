"""The shared base-evaluation cache is keyed by everything that changes its numbers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scd.io import cache_key
from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict
from scd.quickstart import QUICKSTART_RECIPE

pytestmark = pytest.mark.slow


def test_another_dtype_recomputes_the_base_evaluation(toy_model: Path, tmp_path: Path) -> None:
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "cache" / "toy-model" / key)
    said: dict[str, list[str]] = {}
    for dtype in ("float32", "bfloat16", "float32"):
        data = {
            **QUICKSTART_RECIPE,
            "data": {**QUICKSTART_RECIPE["data"], "max_train": 20, "max_eval": 5},
            "train": {**QUICKSTART_RECIPE["train"], "max_steps": 1},
            "eval": {"dtype": dtype, "bias": {"enabled": True, "limit": 60}},
            "run": {"name": f"run-{dtype}"},
        }
        lines = said.setdefault(dtype, [])
        run_recipe(
            recipe_from_dict(data, "test"),
            tmp_path / f"run-{dtype}-{len(said)}",
            tmp_path / "cache",
            progress=False,
            say=lines.append,
        )
    assert len(list((tmp_path / "cache" / "base").glob("bias-*"))) == 2
    assert "  base/bias ..." in said["bfloat16"]  # computed, not taken from float32's cache
    assert any(x.startswith("  base/bias: cached") for x in said["float32"][-10:])
