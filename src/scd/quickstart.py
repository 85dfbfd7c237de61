"""``scd quickstart``: the whole SCD loop on CPU, with no network and no account.

Runs the embedded copy of ``recipes/quickstart.yaml`` through the pipeline (``scd run``): builds
the planted-bias toy model, generates the contact prompts over the packaged toy descriptors,
LoRA-tunes it on setting 1, evaluates the base model on every prompt and the tuned model on the
held-out prompts (one engine), writes the tables and the report, and prints Table 10.
"""

from __future__ import annotations

from pathlib import Path

from scd.pipeline.runner import run_recipe
from scd.train.recipe import recipe_from_dict

__all__ = ["QUICKSTART_RECIPE", "run_quickstart"]

QUICKSTART_RECIPE = {
    "model": "toy",
    "toy_model": {"bias_axes": ["religion", "nationality"], "seed": 0},
    "data": {"descriptors": "toy", "setting": 1, "max_train": 400, "max_eval": 50},
    "lora": {"r": 8, "alpha": 16, "dropout": 0.0},
    "train": {
        "batch_size": 16,
        "grad_accum": 1,
        "learning_rate": 2e-3,
        "warmup_ratio": 0.0,
        "max_grad_norm": 1.0,
        "gradient_checkpointing": False,
        "bf16": False,
        "device": "cpu",
        "logging_steps": 5,
        "save_steps": 25,
    },
    "eval": {"batch_size": 64, "bias": {"enabled": True}},
    "wandb": {"enabled": False, "project": "scd-quickstart"},
    "run": {"name": "quickstart"},
}  # the values of recipes/quickstart.yaml (the package does not ship the recipes directory)


def run_quickstart(out: Path | str) -> Path:
    """Run (or resume) the quickstart into ``out``, print Table 10; return the report path.

    Each stage prints its name and time; progress bars (toy model, evaluations, training) are
    shown when stderr is a terminal.
    """
    import sys

    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    out = Path(out)
    recipe = recipe_from_dict(QUICKSTART_RECIPE, "quickstart")
    # the cache beside the run, as `scd run --outputs ROOT` keeps it (ROOT/<run>, ROOT/cache)
    report = run_recipe(recipe, out, out.parent / "cache", progress=sys.stderr.isatty())
    table = (out / "tables" / "table10.md").read_text()
    print("\n" + table.split("\n", 2)[2].strip() + "\n")
    print(f"Report: {report} (and {out / 'report.md'}; tables in {out / 'tables'})")
    return report
