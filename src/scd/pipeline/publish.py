"""What a run does with a tuned arm once it is evaluated: its results into the summary of the
W&B run that trained it (a :class:`~scd.pipeline.jobs.TrackJob`), and the adapter with its
model card to the Hub (a :class:`~scd.pipeline.jobs.PushJob`, a resumable stage). ``run``:
the :class:`scd.pipeline.run.Run` executing the job."""

from __future__ import annotations

import dataclasses

from scd.pipeline.jobs import PushJob, TrackJob
from scd.pipeline.run_interface import JobRunner

__all__ = ["push", "track"]


def track(run: JobRunner, job: TrackJob) -> None:
    """The tuned arm's results into its training's W&B run, when any of its evaluations ran in
    this process."""
    if not any(stage in run.ran_stages for _, stage, _ in job.evals):
        return
    from scd.report.wandb_log import log_tuned_results

    recipe = dataclasses.replace(run.recipe, wandb=run.wandb_of(job.setting, job.arm, job.seed))
    log_tuned_results(
        recipe,
        job.adapter,
        {name: str(out) for name, _, out in job.evals},
        before={name: str(out) for name, out in job.before},
    )


def push(run: JobRunner, job: PushJob) -> None:
    """The adapter to its Hub repository with its before/after model card, as the stage
    ``job.stage`` (done once ``hub.json`` is written: a failed upload is retried by the next
    run)."""
    from scd.report.model_card import PUSHED, push_adapter
    from scd.report.tuned import tuned_results

    def work() -> None:
        evaluated = tuned_results(
            {name: str(out) for name, out in job.evals},
            {name: str(out) for name, out in job.before},
        )
        private = run.recipe.train.hub_private_repo
        push_adapter(job.adapter, job.repo, private=private, results=evaluated)

    run.stage(job.stage, [job.adapter / PUSHED], work)
