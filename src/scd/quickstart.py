"""``scd quickstart``: the whole SCD loop on CPU, with no network and no account --
``recipes/quickstart.yaml`` (package data) through the pipeline (``scd run``); its stages are
listed in the command's help (:mod:`scd.cli_args`).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import yaml

from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict

__all__ = ["QUICKSTART_RECIPE", "run_quickstart"]

# shipped in the package (the repository's recipes/ is a link to src/scd/recipes/)
QUICKSTART_RECIPE = yaml.safe_load(files("scd").joinpath("recipes/quickstart.yaml").read_text())


def run_quickstart(out: Path | str) -> Path:
    """Run (or resume) the quickstart into ``out`` (it ends with Table 10); return the report's
    path. Each stage prints its name and time; progress goes to stderr (see
    :mod:`scd.progress`)."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    out = Path(out)
    recipe = recipe_from_dict(QUICKSTART_RECIPE, "quickstart")
    # the cache beside the run, as `scd run --outputs ROOT` keeps it (ROOT/<run>, ROOT/cache)
    report = run_recipe(recipe, out, out.parent / "cache")
    print(f"Open {report}; the tables (Markdown, CSV, JSON) are in {out / 'tables'}")
    return report
