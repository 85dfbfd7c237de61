"""A run as a plan: the tasks of ``scd run`` that group its typed jobs
(:mod:`scd.pipeline.jobs`), where each arm's results are, and how the plan is made.

:meth:`scd.pipeline.run.Run.plan` makes the plan once a run's shared inputs exist (the model,
the prompt sets, each benchmark's inputs); a launcher (:mod:`scd.pipeline.launch`: local, Ray)
executes it by handing each job to :meth:`scd.pipeline.run.Run.execute`. The plan says *what*
runs and in which order within a task; a launcher decides only *where* and when:

- ``plan.data``: each setting's SFT data and each trained arm's rows, made first (by the driver:
  every task of a setting reads them);
- ``plan.tasks``: the base model's task (its evaluations, cached across runs) and one task per
  setting and arm -- its training, its evaluations on every enabled benchmark, its capability
  cost, its W&B summary, its upload to the Hub. Every launcher runs a task's ``own_model`` jobs
  before its ``engine`` jobs (:meth:`scd.pipeline.run.Run.execute_task`; the local launcher:
  those of every task before its one engine loads), so that the engine never shares a GPU with
  a training run;
- ``plan.arms``: where each arm's results are, for ``layout.json`` and the report.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scd.config.vocabulary import SCD_ARM, SETTING_DATA
from scd.io import cache_key
from scd.models import model_fingerprint
from scd.pipeline.jobs import (
    CapabilityJob,
    DataJob,
    EraseJob,
    EvalJob,
    Job,
    PushJob,
    SteerJob,
    TrackJob,
    TrainJob,
)
from scd.train.arms import arm_class

if TYPE_CHECKING:
    from scd.pipeline.run_interface import PlanSource

__all__ = ["make_plan", "ArmResults", "Plan", "Task", "arm_dir", "setting_data"]


def arm_dir(setting: int, arm: str) -> str:
    """An arm's directory in the run: ``setting-N/arm-<arm>``, SCD's own too (an earlier scd
    kept SCD's in ``setting-N`` itself: :mod:`scd.pipeline.migrate` moves it)."""
    return f"setting-{setting}/arm-{arm}"


def setting_data(run_dir: Path, setting: int) -> Path:
    """A setting's SFT data and held-out prompts, which every arm of the setting reads (its
    rows, its held-out evaluations): ``setting-N/sft`` -- data, not an arm."""
    return run_dir / f"setting-{setting}" / SETTING_DATA


@dataclass(frozen=True)
class Task:
    """Jobs that run in this order in one process (a Ray task); ``home``: a directory of its
    own (a Ray worker writes its pid there), ``shards``: whether its evaluations may be cut
    into slices (the base model's)."""

    name: str
    jobs: tuple[Job, ...]
    home: Path | None = None
    shards: bool = False

    @property
    def adapters(self) -> list[str]:
        return [str(j.adapter) for j in self.jobs if isinstance(j, TrainJob)]


@dataclass(frozen=True)
class ArmResults:
    """Where one arm's results are: its adapter or system prompt, each evaluation's directory
    (by job name), its capability directory."""

    setting: int | None  # None: the base model (one for every setting)
    arm: str
    sft: Path | None = None  # the setting's SFT data and held-out prompts
    adapter: Path | None = None
    system_prompt: str | None = None
    evals: dict[str, Path] = field(default_factory=dict)
    capability: Path | None = None
    seed: int | None = None  # the arena's seeds: the seed it was trained with
    steer: Path | None = None  # the steering directory it adds
    erase: Path | None = None  # the eraser directory it applies

    def to_dict(self) -> dict[str, Any]:
        seed = {} if self.seed is None else {"seed": self.seed}  # layouts without seeds as before
        seed |= {k: str(v) for k, v in (("steer", self.steer), ("erase", self.erase)) if v}
        return {
            "setting": self.setting,
            "arm": self.arm,
            **seed,
            "sft": str(self.sft) if self.sft else None,
            "adapter": str(self.adapter) if self.adapter else None,
            "system_prompt": self.system_prompt,
            "evals": {k: str(v) for k, v in self.evals.items()},
            "capability": str(self.capability) if self.capability else None,
        }


@dataclass(frozen=True)
class Plan:
    """Everything a run does after its shared inputs exist (see the module docstring)."""

    data: tuple[DataJob, ...]
    tasks: tuple[Task, ...]
    arms: tuple[ArmResults, ...]
    arena: bool  # the recipe lists arms: capability jobs, the arena table

    @property
    def adapters(self) -> list[str]:
        return [a for t in self.tasks for a in t.adapters]

    def stages(self) -> list[str]:
        """Every job's stage name, in plan order (the data first)."""
        return [
            j.stage
            for j in (*self.data, *(j for t in self.tasks for j in t.jobs))
            if hasattr(j, "stage")
        ]


def make_plan(run: PlanSource) -> Plan:
    """The plan of ``run`` (:class:`scd.pipeline.run.Run`, its inputs prepared).

    Without ``arms`` the arms are the base model and SCD's ``sft`` per setting (the paper's
    before/after); with them each listed arm of each setting, and each arm's capability
    cost; with ``arena.seeds`` each trained arm once per seed (``seed-<s>/`` in its
    directory; the rows it trains on made once)."""
    r = run.recipe
    arena = bool(r.arms)
    arms = r.arm_names or ["base", SCD_ARM]
    base_evals = _evals(run, None, "base", None, None)
    base = ArmResults(None, "base", evals={j.name: j.out for j in base_evals})
    base_jobs: list[Any] = list(base_evals)
    if arena:
        base = dataclasses.replace(base, capability=run.dir / "base" / "capability")
        base_jobs.append(CapabilityJob("base/capability", base.capability))
    data, tasks, results = [], [Task("base", tuple(base_jobs), shards=True)], [base]
    units = {arm: arm_class(arm)() for arm in arms}
    seeds = list(r.arena.seeds or [None])
    trained = len(r.settings) * len(seeds) * sum(units[a].method is not None for a in arms[1:])
    for n in r.settings:
        sft = setting_data(run.dir, n)
        data.append(DataJob(f"setting-{n}/{SETTING_DATA}", n, None, sft))
        for arm in arms[1:]:
            unit = units[arm]
            if unit.own_rows:  # made once, whatever the seeds
                rows = run.dir / arm_dir(n, arm) / "data"
                data.append(DataJob(f"{arm_dir(n, arm)}/data", n, arm, rows))
            for seed in seeds if unit.method is not None else [None]:
                task, result = _arm_task(run, (n, sft), arm, seed, base, trained)
                tasks.append(task)
                results.append(result)
    return Plan(tuple(data), tuple(tasks), tuple(results), arena)


def _arm_task(
    run: PlanSource,
    setting: tuple[int, Path],
    arm: str,
    seed: int | None,
    base: ArmResults,
    adapters: int,
) -> tuple[Task, ArmResults]:
    """The task of one arm of setting ``(n, sft dir)`` (its training, with ``seed`` when the
    arena has seeds), and where its results will be."""
    r, (n, sft) = run.recipe, setting
    unit = arm_class(arm)()
    where = arm_dir(n, arm) + ("" if seed is None else f"/seed-{seed}")
    jobs: list[Any] = []
    adapter, system, steer = None, unit.system_prompt(r), None
    if unit.method is not None:
        rows = run.dir / arm_dir(n, arm) / "data" if unit.own_rows else sft
        adapter = run.dir / where / "adapter"
        jobs.append(TrainJob(f"{where}/train", n, arm, unit.method, rows, adapter, seed=seed))
    if unit.steers:
        steer = run.dir / where / "vector"
        jobs.append(SteerJob(f"{where}/vector", n, arm, sft, steer))
    erase = run.dir / where / "eraser" if unit.erases else None
    if erase is not None:
        jobs.append(EraseJob(f"{where}/eraser", n, arm, sft, erase))
    evals = _evals(run, (n, sft), f"{where}/eval", adapter, system, steer, erase)
    jobs += evals
    capability = run.dir / where / "capability" if r.arms else None
    if capability is not None:
        hooks = {"steer": steer, "erase": erase}
        jobs.append(CapabilityJob(f"{where}/capability", capability, adapter, system, **hooks))
    before = tuple(
        (j.name, base.evals[k]) for j in evals if (k := _base_job(j.name, sft)) in base.evals
    )
    if adapter is not None and r.wandb.enabled:
        evaluated_at = tuple((j.name, j.stage, j.out) for j in evals)
        jobs.append(TrackJob(n, arm, adapter, evaluated_at, before, seed=seed))
    if adapter is not None and r.train.push_to_hub:
        repo = _hub_repo(r.train.hub_model_id, n, arm, adapters, seed)
        results_of = tuple((j.name, j.out) for j in evals)
        jobs.append(PushJob(f"{where}/push", repo, adapter, results_of, before))
    name = f"setting {n}" + ("" if arm == SCD_ARM else f" {arm}")  # SCD's: the setting's
    name += "" if seed is None else f" seed {seed}"
    evaluated = {j.name: j.out for j in evals}
    result = ArmResults(n, arm, sft, adapter, system, evaluated, capability, seed, steer, erase)
    return Task(name, tuple(jobs), home=run.dir / where), result


def _hub_repo(repo: str, setting: int, arm: str, adapters: int, seed: int | None = None) -> str:
    """An adapter's Hub repository: ``train.hub_model_id`` itself when the run trains one
    adapter, else ``<it>-setting-<n>`` (and ``-<arm>`` for arms other than SCD's, named by its
    setting alone; ``-seed-<s>`` with the arena's seeds)."""
    if adapters == 1:
        return repo
    tail = ("" if arm == SCD_ARM else f"-{arm}") + ("" if seed is None else f"-seed-{seed}")
    return f"{repo}-setting-{setting}{tail}"


def _base_job(name: str, sft: Path) -> str:
    """The base model's job a tuned result of ``name`` is compared with (the benchmark's)."""
    from scd.eval.benchmarks import REGISTRY

    return REGISTRY[name].base_job(sft) if name in REGISTRY else name


def _evals(
    run: PlanSource,
    setting: tuple[int, Path] | None,
    prefix: str,
    adapter: Path | None,
    system: str | None,
    steer: Path | None = None,
    erase: Path | None = None,
) -> list[EvalJob]:
    """Every enabled benchmark's jobs for the base model (``setting`` None: results cached by
    their :meth:`~scd.eval.benchmarks.base.Benchmark.identity`) or for an arm of setting
    ``(n, sft dir)`` (into ``prefix/<job>`` of the run directory)."""
    jobs = []
    for bench, options in run.benchmarks:
        for job in bench.jobs(run, options, setting):
            stage = f"{prefix}/{job.name}"
            if setting is not None:
                out = run.dir / prefix / job.name
            elif run.state.done(stage):  # where it went then (the cache may have moved since)
                out = run.state.output(stage).parent
            else:
                fingerprint = model_fingerprint(run.model)
                digest = cache_key(
                    **bench.identity(job.options, fingerprint, None, run.engine, cache=True)
                )
                out = run.cache / "base" / f"{job.name}-{digest}"
            jobs.append(
                EvalJob(
                    stage,
                    bench.name,
                    job.name,
                    job.options,
                    out,
                    adapter,
                    system,
                    cached=setting is None,
                    steer=steer,
                    erase=erase,
                )
            )
    return jobs
