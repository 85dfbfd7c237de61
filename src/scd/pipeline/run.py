"""A run of ``scd run RECIPE``: its directory, its state and resumable stages, its shared
inputs, its plan of jobs (:mod:`scd.pipeline.plan`), each job handed to its work
(:mod:`scd.pipeline.data_train_eval`, :mod:`scd.pipeline.measures`,
:mod:`scd.pipeline.publish`) and its end (``layout.json``, the report), for one setting or a
sweep, with or without the arena's arms. Launchers (:mod:`scd.pipeline.launch`: in this process
or on Ray) execute the plan; the same stages, state and resume either way.

Layout of ``outputs/<run_id>/`` (``run_id``: ``run.name``, else the recipe file's name)::

    recipe.json  state.json  layout.json   the recipe held; the finished stages; where each
                                            result is (and the model's fingerprint)
    data/prompts/  data/eval_prompts/      contact prompts (eval_prompts: a source split's)
    data/stigma*/                          stigma probe prompts (when the recipe asks for probes)
    setting-<N>/sft/                       the setting's SFT data + held-out prompts (every
                                            arm reads them; data, not an arm)
    setting-<N>/arm-<arm>/                 each arm (SCD's own: arm-sft; the arena's arms:):
      adapter/                              its LoRA adapter (checkpoints/ while training)
      eval/<job>/                           its evaluations (one per benchmark)
      data/  capability/                    its own rows; its capability cost (the arena)
      seed-<S>/                             with arena.seeds: adapter/, eval/, capability/ per seed
    base/capability/                       the base model's row of the arena's capability cost
    tables/  figures/  report.md  report.html

Base-model evaluations go to ``outputs/cache/base/`` keyed by their identity
(:meth:`~scd.eval.benchmarks.base.Benchmark.identity`: the model's fingerprint, the engine
options that change answers, the benchmark's options and the hashes of its data): the base model
is evaluated once per prompt set, on all of it, and each setting's "before" is the slice of its
held-out prompts, so a sweep of the 8 settings -- or 8 recipes over the same prompts -- evaluates
the base once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scd.config.options import Options
from scd.config.schema import Recipe, WandbSpec
from scd.config.settings import load_settings
from scd.config.vocabulary import SCD_ARM
from scd.data_gen.sft import prepare_sft
from scd.eval.benchmarks import REGISTRY
from scd.eval.benchmarks.base import Benchmark
from scd.eval.engines import SharedEngine
from scd.pipeline.data_train_eval import data, evaluate, train
from scd.pipeline.jobs import (
    CapabilityJob,
    DataJob,
    EraseJob,
    EvalJob,
    Job,
    SteerJob,
    TrackJob,
    TrainJob,
)
from scd.pipeline.layout import write_layout
from scd.pipeline.measures import capability, erase, steer
from scd.pipeline.plan import Plan, Task, make_plan
from scd.pipeline.publish import push, track
from scd.pipeline.state import RunState

__all__ = ["Run", "duration"]


def duration(seconds: float) -> str:
    """``12.3 s`` or ``4 min 5 s``."""
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds // 60:.0f} min {seconds % 60:.0f} s"


class Run:
    """The stages of one run of ``recipe`` in ``run_dir``; each is skipped when ``state.json``
    says it finished. Base-model results are cached in ``cache_dir``."""

    def __init__(
        self,
        recipe: Recipe,
        run_dir: Path,
        cache_dir: Path,
        *,
        model: str | None = None,
        progress: bool = True,
        say: Callable[[str], None] = print,
    ) -> None:
        """``model``: the model already resolved to a loadable name (a Ray worker's run: the
        driver built it); otherwise :meth:`prepare` resolves the recipe's."""
        self.recipe, self.dir, self.cache = recipe, Path(run_dir), Path(cache_dir)
        self.progress, self.say = progress, say
        self.ran = 0  # stages run by this invocation
        self.ran_stages: set[str] = set()  # their names
        self.current: tuple[str, str | None] | None = None  # the stage running, its section
        self.started = time.time()
        self.state = RunState(self.dir, recipe.to_dict())
        self.model = model or recipe.model
        self.engine = recipe.eval.to_engine_spec()
        self.settings = load_settings(recipe.data.settings_file)
        self.prompts: Path | None = None
        self.eval_prompts: Path | None = None
        self.benchmarks: list[tuple[Benchmark, Options]] = []  # the enabled ones, their options

    def stage(
        self,
        name: str,
        outputs: list[Path],
        work: Callable[[], Any],
        cached: bool = False,
        section: str | None = None,
        **info: Any,
    ) -> None:
        """Run ``work`` unless the stage finished in this run directory; print its name and,
        when done, its time. A ``cached`` stage (its outputs live in the shared cache) whose
        outputs exist is taken from the cache, not run again (and the cache is not rewritten).
        ``section``: the recipe section its options come from (errors name its keys)."""
        if self.state.done(name):
            return
        started = time.perf_counter()
        if cached and all(p.exists() for p in outputs):
            self.say(f"  {name}: cached ({outputs[0].parent})")
            self.state.finish(name, outputs, started, cached=True, **info)
            return
        self.say(f"  {name} ...")
        self.ran += 1
        self.ran_stages.add(name)
        self.current = (name, section)
        work()
        self.current = None
        self.state.finish(name, outputs, started, **info)
        self.say(f"  {name}: done in {duration(time.perf_counter() - started)}")

    # -- inputs --------------------------------------------------------------------------------
    def build_model(self) -> None:
        """Resolve the model to a loadable name: a GGUF file is converted once (cached by its
        sha256), ``toy`` builds the planted-bias model once (cached by its spec)."""
        if self.recipe.model != "toy":
            from scd.models import resolve_model

            self.model = resolve_model(self.recipe.model, key="model", say=self.say)
            return
        from scd.models.toy import ensure_toy_model

        toy = self.recipe.toy_model
        words = sorted({w for bench, options in self._enabled() for w in bench.toy_words(options)})
        path = ensure_toy_model(
            toy.bias_axes, toy.seed, self.cache, self.say, self.progress, toy.steer_layer, words
        )
        self.ran += path.stat().st_mtime > self.started  # built by this invocation
        self.model = str(path)

    def _step(self, name: str, output: Path, work: Callable[[], Any]) -> None:
        """A step of :func:`~scd.data_gen.sft.prepare_sft` as a stage of the run."""
        self.stage(name, [output], lambda: self._warn(work()))

    def _warn(self, manifest: dict[str, Any]) -> None:
        for warning in manifest.get("warnings", []):
            self.say(f"  warning: {warning}")

    def prepare(self) -> None:
        """The run's shared inputs: the model (:meth:`build_model`), the prompt sets and each
        benchmark's inputs (:meth:`generate`)."""
        self.build_model()
        self.generate()

    def generate(self) -> None:
        """The prompt sets, and each enabled benchmark's inputs (generated once; read back when
        they were)."""
        self.prompts, self.eval_prompts = prepare_sft(
            self.recipe.data, self.dir / "data", self.recipe.settings, step=self._step
        )
        self.benchmarks = [
            (bench, bench.prepare(self, options)) for bench, options in self._enabled()
        ]

    def _enabled(self) -> list[tuple[Benchmark, Any]]:
        """The recipe's enabled benchmarks, each with its options, its data fetched and verified
        into ``$SCD_DATA_DIR/<dataset>`` where the recipe gives none."""
        out = []
        for name, bench in REGISTRY.items():
            options = getattr(self.recipe.eval, name, None)
            if options is not None and options.enabled:
                out.append((bench, bench.with_data(options, say=self.say)))
        return out

    # -- the plan ------------------------------------------------------------------------------
    def plan(self) -> Plan:
        """The jobs of the run (:func:`scd.pipeline.plan.make_plan`); its inputs must exist
        (:meth:`prepare`)."""
        return make_plan(self)

    # -- the jobs ------------------------------------------------------------------------------
    def execute(
        self,
        job: Job,
        *,
        engine: SharedEngine | None = None,
        launch: Any = None,
        processes: int = 1,
    ) -> None:
        """Run one job of :meth:`plan` as a resumable stage (skipped when it finished).

        ``engine``: one loaded for several evaluations of the run's model; ``launch``: how the
        slices of a sharded evaluation run (None: in turn); ``processes`` > 1: training under
        ``torchrun``, one process per GPU (a Ray task with several GPUs)."""
        if isinstance(job, DataJob):
            data(self, job, self._step)
        elif isinstance(job, TrainJob):
            train(self, job, processes)
        elif isinstance(job, SteerJob):  # the steer arm's search, or the erase arm's
            (erase if isinstance(job, EraseJob) else steer)(self, job)
        elif isinstance(job, EvalJob):
            evaluate(self, job, engine, launch)
        elif isinstance(job, CapabilityJob):
            capability(self, job)
        elif isinstance(job, TrackJob):
            track(self, job)
        else:
            push(self, job)

    def execute_task(self, task: Task, *, launch: Any = None, processes: int = 1) -> None:
        """One task of the plan in a process of its own (a Ray task; a Slurm job would do the
        same): its ``own_model`` jobs first (training, the capability measures), then one engine
        for its evaluations, closed at the end -- so that the engine never shares a GPU with a
        training run. ``launch``, ``processes``: see :meth:`execute`."""
        for job in task.jobs:
            if job.phase == "own_model":
                self.execute(job, processes=processes)
        engine = None
        try:
            for job in task.jobs:
                if job.phase == "engine":
                    engine = engine or self.engine_for(task.adapters)
                    self.execute(job, engine=engine, launch=launch)
        finally:
            if engine is not None:
                engine.close()

    def wandb_of(self, n: int, arm: str = SCD_ARM, seed: int | None = None) -> WandbSpec:
        """The W&B section of an arm's runs: the run's group, ``<group>/setting-<n>`` (SCD's
        own arm) or ``<group>/setting-<n>/<arm>`` (and ``/seed-<s>`` with the arena's
        seeds)."""
        group = self.recipe.wandb.group or self.dir.name
        name = f"{group}/setting-{n}" + ("" if arm == SCD_ARM else f"/{arm}")
        name += "" if seed is None else f"/seed-{seed}"
        return dataclasses.replace(self.recipe.wandb, group=group, run_name=name)

    def engine_for(self, adapters: list[str]) -> SharedEngine:
        """One engine for the base model and ``adapters``, loaded on first use."""
        import gc
        import sys

        from scd.models import resolve_model

        gc.collect()  # the trainers' models
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
        return SharedEngine(self.engine, resolve_model(self.model), adapters=adapters)

    # -- the end -------------------------------------------------------------------------------
    def write_layout(self, plan: Plan) -> None:
        """``layout.json``: where each of the plan's results is (or will be), so that ``scd
        report`` can show a run before its jobs are done
        (:func:`scd.pipeline.layout.write_layout`)."""
        write_layout(self, plan)

    def finish(self, plan: Plan, started: float) -> Path:
        """``layout.json``, the report and the W&B summary run of a run whose jobs are done;
        return the report's path."""
        from scd.report.build import build_report

        self.write_layout(plan)
        report = self.dir / "report.html"
        if self.ran:  # results came in since the report was made (an arm added): made again
            self.state.stages.pop("report", None)
        self.stage("report", [report], lambda: build_report(self.dir))
        if self.recipe.wandb.enabled:
            from scd.report.wandb_log import log_run

            self.stage("wandb", [self.dir / "report.md"], lambda: log_run(self.dir, self.recipe))
        heads = [b.headline_table for b in REGISTRY.values() if b.headline_table]
        for name in [*heads, "arena"]:  # the benchmarks' before and after; the arena
            table = self.dir / "tables" / f"{name}.md"
            if table.is_file():
                self.say("\n" + table.read_text().split("\n", 2)[2].strip() + "\n")
        if self.ran == 0:
            self.say(f"all stages finished earlier; nothing to do: {report}")
        else:
            took = duration(time.perf_counter() - started)
            self.say(f"done in {took}: {self.dir / 'report.md'}, {report}")
        return report
