"""``scd run RECIPE.yaml``: the run's inputs -> its plan (:meth:`scd.pipeline.run.Run.plan`:
data, training per setting and arm, evaluations, capability) executed by a launcher -> tables ->
report.

A launcher is one class with ``execute(run, plan)`` (:class:`Launcher`). :class:`LocalLauncher`
runs the plan in this process: every job that loads a model of its own first (data, training,
the capability measures), then the model is loaded for evaluation once
(:class:`~scd.eval.engines.SharedEngine`): vLLM serves every adapter as a ``LoRARequest`` on one
``LLM``, transformers switches PEFT adapters on one base model -- so that the evaluation engine
(vLLM reserves most of the GPU memory) never shares a GPU with a training run. On Ray:
:class:`scd.pipeline.ray_launcher.RayLauncher`. A Slurm launcher (submitit) would be one more
class: submit each task of the plan as a job, as the Ray launcher does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from scd.config.schema import Recipe
from scd.errors import InputError
from scd.pipeline.migrate import migrate_run
from scd.pipeline.plan import Plan
from scd.pipeline.ray_launcher import RayLauncher, import_ray
from scd.pipeline.recipe import in_recipe_terms, validate_inputs
from scd.pipeline.run import Run

__all__ = ["Launcher", "LocalLauncher", "run_recipe"]


class Launcher(Protocol):
    """Executes a plan: every job handed to :meth:`Run.execute`, in an order the plan allows."""

    def execute(self, run: Run, plan: Plan) -> None:
        """Run every job of ``plan`` (each a resumable stage of ``run``)."""


class LocalLauncher:
    """The plan in this process: the data, every ``own_model`` job (training, the capability
    measures) of every task, then the evaluations with one engine (``share_engine=False``: a
    fresh engine per evaluation, for benchmarks comparing the two)."""

    def __init__(self, share_engine: bool = True) -> None:
        self.share_engine = share_engine

    def execute(self, run: Run, plan: Plan) -> None:
        for job in plan.data:
            run.execute(job)
        for task in plan.tasks:
            for job in task.jobs:
                if job.phase == "own_model":
                    run.execute(job)
        engine = run.engine_for(plan.adapters) if self.share_engine else None
        try:
            for task in plan.tasks:
                for job in task.jobs:
                    if job.phase == "engine":
                        run.execute(job, engine=engine)
        finally:
            if engine is not None:
                engine.close()


def run_recipe(
    recipe: Recipe,
    run_dir: Path | str,
    cache_dir: Path | str,
    *,
    progress: bool = True,
    say: Callable[[str], None] = print,
    share_engine: bool = True,
    launcher: str | Launcher = "local",
    address: str | None = None,
) -> Path:
    """Run (or resume) every stage of ``recipe`` in ``run_dir``; return the report's path.

    ``launcher``: ``"local"`` (see the module docstring; ``share_engine=False``: a fresh engine
    per evaluation stage, for benchmarks comparing the two), ``"ray"``: the base evaluation and
    each setting and arm (training, evaluations, capability) as Ray tasks on the cluster at
    ``address`` (None: a local one), or a :class:`Launcher` of your own. Either way the same
    stages, state and resume.

    Raises:
        InputError: a recipe the pipeline cannot run (checked before any work), a run directory
            of another recipe, or bad input found by a stage.
        RunFailed: a Ray task failed (the others' results are kept).
    """
    if launcher == "ray":
        import_ray()  # before any work
    validate_inputs(recipe)
    migrate_run(run_dir, say)  # an earlier scd's layout: SCD's arm into setting-N/arm-sft
    run = Run(recipe, Path(run_dir), Path(cache_dir), progress=progress, say=say)
    chosen = launcher
    if isinstance(launcher, str):
        chosen = RayLauncher(address) if launcher == "ray" else LocalLauncher(share_engine)
    held = False
    try:
        started = time.perf_counter()
        held = run.state.hold_recipe()
        where = f" on Ray ({address or 'a local cluster'})" if launcher == "ray" else ""
        settings = ", ".join(map(str, recipe.settings))
        arms = f"; arms {', '.join(recipe.arm_names)}" if recipe.arms else ""
        say(f"scd run -> {run.dir} (settings {settings}{arms}){where}")
        done = list(run.state.stages)  # finished by an earlier invocation
        run.prepare()
        plan = run.plan()
        run.write_layout(plan)  # `scd report` shows the run from now on, finished or not
        pending = [s for s in plan.stages() if not run.state.done(s)]
        if done and pending:  # a resumed run says what it will not do again
            more = ", ..." if len(done) > 5 else ""
            say(
                f"  resuming: {len(done)} stages finished earlier are kept "
                f"({', '.join(done[:5])}{more}); {len(pending)} to run"
            )
        chosen.execute(run, plan)
        return run.finish(plan, started)
    except BaseException as err:  # bad input, a failure, Ctrl-C
        if held:  # written now and nothing finished: the corrected recipe may run here
            run.state.release_recipe()
        if isinstance(err, InputError):
            raise in_recipe_terms(err, *(run.current or (None, None))) from err
        raise
