"""The documentation site builds strictly (every page, link and API entry resolves), and its
references are generated from the code: every recipe key and every command is in them."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scd.cli import build_parser
from scd.config.options import speed_keys
from scd.config.reference import cli_reference, recipe_keys, recipe_reference
from scd.config.schema import Recipe
from scd.pipeline.recipe import recipe_sections

REPO = Path(__file__).resolve().parents[1]


def _flat(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in data.items():
        if isinstance(value, dict) and value and key != "settings":
            keys |= _flat(value, f"{prefix}{key}.")
        else:
            keys.add(prefix + key)
    return keys


def test_the_recipe_reference_has_every_key_and_which_a_run_holds_fixed() -> None:
    from scd.pipeline.recipe import recipe_from_dict
    from scd.quickstart import QUICKSTART_RECIPE

    recipe = recipe_from_dict(QUICKSTART_RECIPE, "quickstart")
    text = recipe_reference(recipe_sections())
    every = _flat(recipe.to_dict())
    rows = [r for r in recipe_keys(sections=recipe_sections()) if not r.get("section")]
    listed = {row["key"] for row in rows}
    assert every - listed == set() and "`eval.bias.limit`" in text
    assert [r["key"] for r in rows if not r["help"]] == []  # each key's help, from option()
    unfixed = speed_keys(Recipe)
    for key in ("train.push_to_hub", "eval.batch_size", "wandb.project"):
        line = next(x for x in text.splitlines() if x.startswith(f"| `{key}` |"))
        assert "| no |" in line, line
    assert "wandb" in unfixed and "| `train.learning_rate` | float | `0.0003` | yes |" in text


def test_the_cli_reference_has_every_command_s_help() -> None:
    parser = build_parser()
    text = cli_reference(parser)
    commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
    for name in commands.choices:
        assert f"## `scd {name}`" in text
    assert "## `scd eval bias`" in text and "## `scd export lm-eval`" in text
    assert "--push-to-hub REPO" in text  # a flag of a nested command
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert wide == [], wide  # the site's code blocks show 80 columns without scrolling


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    recipe = (tmp_path / "reference" / "recipe" / "index.html").read_text()
    assert "train.eval_every_steps" in recipe and "eval.bbq.categories" in recipe
    assert "scd generate contact" in (tmp_path / "reference" / "cli" / "index.html").read_text()
    api = (tmp_path / "reference" / "api" / "index.html").read_text()
    assert "run_recipe" in api and "Run (or resume) every stage" in api  # from the docstring
    for page in ("guides/train", "guides/arena", "validation", "benchmarks"):
        assert (tmp_path / page / "index.html").is_file(), page


def test_every_anchor_a_page_links_to_exists() -> None:
    """``[text](#anchor)`` and ``[text](page.md#anchor)`` in the README, the root pages and
    docs/ point at a heading of the page as the site slugs it (Python-Markdown's ``toc``, which
    GitHub agrees with for headings without dashes or punctuation runs); ``mkdocs build --strict``
    lets a dead anchor pass."""
    import re

    from markdown.extensions.toc import slugify

    pages = [*REPO.glob("*.md"), *(REPO / "docs").rglob("*.md")]

    def anchors(page: Path) -> set[str]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        heads = re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.M)
        return {slugify(re.sub(r"[`*]", "", h), "-") for h in heads}

    dead, checked = [], 0
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            checked += 1
            where = (page.parent / target).resolve() if target else page
            if where.suffix == ".md" and where.is_file() and anchor not in anchors(where):
                dead.append(f"{page.relative_to(REPO)}: {target}#{anchor}")
    assert dead == [] and checked >= 6  # BENCHMARKS.md's links to its GPU section, at least
