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
from scd.report.tuned import tuned_results
from scd.tracking import finish_run, start_run

__all__ = ["log_evaluation", "log_run", "log_tuned_results"]


def log_tuned_results(
    recipe: Recipe,
    adapter: Path | str,
    results: dict[str, str],
    before: dict[str, str] | None = None,
) -> bool:
    """Add a tuned model's results (each benchmark's headline numbers) to the summary of the W&B
    run that trained it (its id is in ``train_manifest.json``), under ``<job>/<name>``; return
    whether a run took them.

    ``before``: per job, the base model's result of it. Then the benchmark's arena columns
    (:meth:`~scd.eval.benchmarks.base.Benchmark.arena`) on the tuned result's items go in too:
    ``before/<job>/<column>`` for the base model, ``after/<job>/<column>`` for the tuned one
    (with the paired test against the base model, ``*_p``), on the same items; and the items
    whose answer changed as a ``wandb.Table`` ``flips/<job>``
    (:meth:`~scd.eval.benchmarks.base.Benchmark.flips`).

    ``scd run`` trains every setting before evaluating, so the training run has finished by
    then: it is continued by id (offline: a folder of its own that ``wandb sync`` uploads into
    the same run); all of it goes into the summary, so the run's history stays the training's.
    """
    manifest = json.loads((Path(adapter) / "train_manifest.json").read_text())
    tuned = tuned_results(results, before)
    summary: dict[str, Any] = {**tuned.headline}
    for name, after in tuned.after.items():
        summary.update({f"after/{name}/{k}": v for k, v in after.items()})
        summary.update({f"before/{name}/{k}": v for k, v in tuned.before[name].items()})
    if not manifest.get("wandb_run_id") or not summary:
        return False
    run = start_run(
        project=recipe.wandb.project,
        name=recipe.wandb.run_name,
        group=recipe.wandb.group,
        entity=recipe.wandb.entity,
        config={},
        directory=Path(adapter),
        job_type="train",
        run_id=manifest["wandb_run_id"],
    )
    if tuned.flips:  # in the summary: history of this run is the training's steps alone
        import wandb

        summary.update({f"flips/{n}": wandb.Table(dataframe=f) for n, f in tuned.flips.items()})
    run.summary.update(summary)
    finish_run(run)
    return True


def log_evaluation(bench: Any, out: Path | str, summary: dict[str, Any], project: str) -> str:
    """One ``scd eval`` result as a W&B run (``job_type`` eval, named ``<benchmark>/<out>``,
    written into ``OUT/wandb``): what it ran (its configuration, secrets redacted) as config,
    its headline numbers in the summary, and its table as a ``wandb.Table``; returns the run id.
    """
    import wandb

    out = Path(out)
    run = start_run(
        project=project,
        name=f"{bench.name}/{out.name}",
        job_type="eval",
        config={"benchmark": bench.name, "run": summary["run"]},
        directory=out,
    )
    run.summary.update({f"{bench.name}/{k}": v for k, v in bench.headline(summary).items()})
    table = bench.table({out.name: out})
    if table.rows:
        run.log({f"tables/{table.name}": wandb.Table(dataframe=pd.DataFrame(table.rows))})
    finish_run(run)
    return run.id


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
