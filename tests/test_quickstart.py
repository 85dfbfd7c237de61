"""The README's first command: `scd quickstart` runs recipes/quickstart.yaml (package data).

The run itself (planted bias found, then reduced; report written) is tested end to end in
tests/pipeline/test_run_e2e.py.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import yaml

from scd.pipeline.recipe import recipe_from_dict
from scd.quickstart import QUICKSTART_RECIPE

REPO = Path(__file__).resolve().parents[1]


def test_every_recipe_ships_in_the_package() -> None:
    shipped = files("scd").joinpath("recipes")
    mine = sorted((REPO / "recipes").rglob("*.yaml"))
    assert len(mine) >= 20
    for path in mine:
        name = path.relative_to(REPO / "recipes").as_posix()
        assert shipped.joinpath(name).read_text() == path.read_text(), name


def test_quickstart_runs_recipes_quickstart_yaml() -> None:
    recipe = yaml.safe_load((REPO / "recipes" / "quickstart.yaml").read_text())
    assert recipe == QUICKSTART_RECIPE
    resolved = recipe_from_dict(QUICKSTART_RECIPE).to_dict()
    assert resolved["model"] == "toy" and resolved["wandb"]["enabled"] is False
