"""Weights & Biases logging of a finished ``scd run``.

One W&B *group* per run (the run id): each setting is one W&B run of the group -- its training
(TRL's callback logs the loss curves; kept across kills and resumes), then its evaluations'
headline numbers in its summary, and its adapter as a ``model`` artifact with
``wandb.log_adapter`` -- and a last run ``<run_id>/report`` carries the resolved recipe as config,
every table of ``tables/`` as a ``wandb.Table`` and every figure as a ``wandb.Image``. Without a
key or a network the runs are offline (the path and the ``wandb sync`` command are printed);
secrets are never logged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from scd.config.schema import Recipe
from scd.eval.benchmarks import REGISTRY
from scd.tracking import finish_run, start_run

__all__ = ["log_run", "log_tuned_results"]


def log_tuned_results(recipe: Recipe, adapter: Path | str, results: dict[str, str]) -> bool:
    """Add a tuned model's results (each benchmark's headline numbers) to the summary of the W&B
    run that trained it (its id is in ``train_manifest.json``), under ``<job>/<name>``; return
    whether a run took them.

    ``scd run`` trains every setting before evaluating, so the training run has finished by
    then: it is continued by id (offline: a second segment that ``wandb sync`` joins to it).
    """
    manifest = json.loads((Path(adapter) / "train_manifest.json").read_text())
    summary: dict[str, Any] = {}
    for name, where in results.items():
        path = Path(where) / "summary.json"
        if path.is_file() and name in REGISTRY:
            headline = REGISTRY[name].headline(json.loads(path.read_text()))
            summary.update({f"{name}/{k}": v for k, v in headline.items()})
    if not manifest.get("wandb_run_id") or not summary:
        return False
    run = start_run(project=recipe.wandb.project, name=recipe.wandb.run_name,
                    group=recipe.wandb.group, entity=recipe.wandb.entity, config={},
                    directory=Path(adapter), job_type="train",
                    run_id=manifest["wandb_run_id"])  # fmt: skip
    run.summary.update(summary)
    finish_run(run)
    return True


def log_run(run_dir: Path | str, recipe: Recipe) -> dict[str, Any]:
    """Log the tables and figures of ``run_dir``; return what was logged."""
    import wandb

    run_dir = Path(run_dir)
    group = recipe.wandb.group or run_dir.name
    run = start_run(
        project=recipe.wandb.project,
        name=f"{group}/report",
        group=group,
        entity=recipe.wandb.entity,
        config={"recipe": recipe.to_dict(), "run_id": run_dir.name},
        directory=run_dir,
        job_type="report",
    )
    logged: dict[str, Any] = {
        "tables": [],
        "figures": [],
        "mode": run.settings.mode,
    }
    for path in sorted((run_dir / "tables").glob("*.csv")):
        frame = pd.read_csv(path)
        run.log({f"tables/{path.stem}": wandb.Table(dataframe=frame)})
        logged["tables"].append(path.stem)
    for path in sorted((run_dir / "figures").glob("*.png")):
        run.log({f"figures/{path.stem}": wandb.Image(str(path))})
        logged["figures"].append(path.stem)
    table10 = run_dir / "tables" / "table10.csv"
    if table10.is_file():
        for row in pd.read_csv(table10).query("contact == 'all'").to_dict("records"):
            for when in ("before", "after"):
                run.summary[f"setting-{row['setting']}/heldout_bias_{when}"] = row[f"{when}_pct"]
    finish_run(run)
    return logged
