"""The jobs of a run that make an arm and measure it (:mod:`scd.pipeline.run` hands them over):
a setting's SFT data or an arm's own rows (a :class:`~scd.pipeline.jobs.DataJob`), an adapter's
training (a :class:`~scd.pipeline.jobs.TrainJob`, in this process or under ``torchrun``) and one
benchmark job of one arm (an :class:`~scd.pipeline.jobs.EvalJob`). ``run``: the
:class:`scd.pipeline.run.Run` executing the job; each job is one of its resumable stages."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scd.data_gen.sft import prepare_sft
from scd.eval.benchmarks import REGISTRY
from scd.pipeline.jobs import DataJob, EvalJob, TrainJob
from scd.pipeline.plan import setting_data
from scd.pipeline.run_interface import JobRunner

if TYPE_CHECKING:
    from scd.eval.engines import SharedEngine

__all__ = ["data", "evaluate", "train"]

Step = Callable[[str, Path, Callable[[], Any]], None]  # a step of prepare_sft as a stage


def data(run: JobRunner, job: DataJob, step: Step) -> None:
    """The setting's SFT data (``job.arm`` None: each step of
    :func:`~scd.data_gen.sft.prepare_sft` a stage, by ``step``) or an arm's own rows made
    from it."""
    d = run.recipe.data
    sft = setting_data(run.dir, job.setting)
    if job.arm is None:  # the setting's SFT data
        from scd.models.protocols import training_protocol

        protocol = training_protocol(run.recipe.bias_protocol)
        prepare_sft(d, run.dir / "data", [job.setting], sft, step=step, protocol=protocol)
        return
    from scd.train.arms import arm_class
    from scd.train.arms.base import RowsInput

    sources = tuple(p for p in (run.prompts, run.eval_prompts) if p is not None)
    inputs = RowsInput(sft, sources, d, run.recipe.arena)
    work = partial(arm_class(job.arm)().write_rows, inputs, job.out)
    run.stage(job.stage, [job.out / "manifest.json"], work, section="data")


def train(run: JobRunner, job: TrainJob, processes: int) -> None:
    """The arm's adapter, trained by its method on the job's rows; ``processes`` > 1: under
    ``torchrun``, one process per GPU of the task."""
    from scd.pipeline.torchrun import torchrun_train
    from scd.train import trainer

    r, d = run.recipe, run.recipe.data
    tuned = dataclasses.replace(
        r,
        model=run.model,
        output_dir=str(job.adapter),
        data=dataclasses.replace(
            d, sft=str(job.data), prompts=None, descriptors=None, setting=job.setting
        ),
        wandb=run.wandb_of(job.setting, job.arm, job.seed),
        train=dataclasses.replace(  # the upload: a push job, once evaluated
            r.train, push_to_hub=False, seed=r.train.seed if job.seed is None else job.seed
        ),
    )
    resume = (job.adapter / "checkpoints").is_dir()
    if processes > 1:  # one process per GPU of the task
        work = partial(torchrun_train, tuned, processes, resume, job.adapter.parent, job.method)
    else:
        work = partial(
            trainer.train, tuned, method=job.method, resume=resume, progress=run.progress
        )
    run.stage(job.stage, [job.adapter / "train_manifest.json"], work)


def evaluate(run: JobRunner, job: EvalJob, engine: SharedEngine | None, launch: Any) -> None:
    """One benchmark job of one arm, by ``engine`` when one is loaded (else an engine of its
    own); ``launch``: how the slices of a sharded evaluation run (None: in turn)."""
    bench = REGISTRY[job.benchmark]
    spec = run.engine
    if job.system_prompt is not None:
        spec = dataclasses.replace(spec, system_prompt=job.system_prompt)
    if job.steer is not None:  # the steer arm: the hf engine adds its vector
        spec = dataclasses.replace(spec, steer=str(job.steer))
    if job.erase is not None:  # the erase arm: the hf engine applies its eraser
        spec = dataclasses.replace(spec, erase=str(job.erase))
    work = partial(
        bench.evaluate,
        run.model,
        job.out,
        adapter=str(job.adapter) if job.adapter else None,
        engine=spec,
        shared=engine,
        progress=run.progress,
        shards=run.recipe.eval.shards if job.cached else 1,
        launch=launch,
        **dataclasses.asdict(job.options),
    )
    run.stage(
        job.stage,
        [job.out / "summary.json"],
        work,
        cached=job.cached,
        section=f"eval.{bench.name}",
    )
