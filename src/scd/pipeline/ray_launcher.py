"""``scd run RECIPE --launcher ray [--address ADDR]``: the tasks of a run's plan side by side on
Ray.

The driver (the ``scd run`` process) holds the run's recipe, builds the model, generates the prompts
and runs the plan's data jobs (each setting's SFT data and its arms' rows), as the local launcher
does. Then each task of the plan is a Ray task -- the base model's evaluations, and each setting and
arm: its training, its evaluations, its capability cost -- all submitted at once and each asking for
``run.resources`` (``num_cpus``, ``num_gpus``; ``max_retries``: Ray retries a task whose worker
died). Placement, retries and resources are Ray's. The report is built by the driver when every task
has finished.

Every task works in the same run directory and cache, which must be a path all nodes see (a
shared file system): the stages, ``state.json`` (written under a file lock) and resume are those
of the local launcher, so killing the driver and running the command again skips the finished
stages and resumes the others (a training at its last checkpoint, an evaluation at its last
chunk). A task that fails does not stop the others; the run then fails naming its tasks.

With ``eval.shards: N`` the base model's bias evaluation is cut into N slices, each a Ray task
scoring into its own record log, merged in prompt order (:func:`scd.eval.tasks.run_task`).
A task that asks for more than one GPU trains under ``torchrun``, one process per GPU.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from scd.errors import InputError, RunFailed, first_line
from scd.pipeline.plan import Plan, Task
from scd.pipeline.recipe import in_recipe_terms, recipe_from_dict
from scd.pipeline.run import Run

__all__ = ["INSTALL_HINT", "RayLauncher", "import_ray"]

INSTALL_HINT = "pip install 'scd[ray]'"
_ENV = ("HF_", "TRANSFORMERS_", "WANDB_", "SCD_", "TOKENIZERS_")  # passed on to the workers


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        InputError: Ray is not installed (with the install hint).
    """
    try:
        import ray
    except ImportError:
        raise InputError(
            f"Ray is not installed ({INSTALL_HINT})", key="launcher", value="ray"
        ) from None
    return ray


def _worker_env() -> dict[str, str]:
    """The driver's HF/W&B/scd settings for the workers; secrets stay on each node."""
    secret = ("TOKEN", "KEY", "SECRET", "PASSWORD")
    return {
        k: v
        for k, v in os.environ.items()
        if k.startswith(_ENV) and not any(s in k for s in secret)
    }


class RayLauncher:
    """Each task of the plan as a Ray task on the cluster at ``address`` (None: a local one)."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def execute(self, run: Run, plan: Plan) -> None:
        """Raises:
        InputError: Ray is not installed, or the cluster cannot be reached.
        RunFailed: a task failed, after Ray's retries (the others finished first).
        """
        ray = import_ray()
        for job in plan.data:  # every task of a setting reads them
            run.execute(job)
        if not ray.is_initialized():
            try:
                env = {"env_vars": _worker_env()}
                ray.init(
                    address=self.address,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.ERROR,
                    runtime_env=env,
                )
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise InputError(
                    f"cannot reach the Ray cluster ({err})", key="address", value=self.address
                ) from None
        r = run.recipe.run.resources
        remote = ray.remote(num_cpus=r.num_cpus, num_gpus=r.num_gpus, max_retries=r.max_retries)
        job = (run.recipe.to_dict(), str(run.dir), str(run.cache), run.model)
        # the base model's task last: the settings take the first slots
        tasks = [t for t in plan.tasks if t.name != "base"] + [
            t for t in plan.tasks if t.name == "base"
        ]
        refs = {t.name: remote(_task).remote(*job, t) for t in tasks if t.jobs}
        run.say(f"  {len(refs)} Ray tasks: {', '.join(refs)}")
        failed = []
        for name, ref in refs.items():
            try:
                ray.get(ref)
            except ray.exceptions.RayError as err:
                what = "the base model" if name == "base" else name
                failed.append(f"{what}: {_cause(err)}")
        if failed:
            raise RunFailed("\n".join(failed))


def _cause(err: BaseException) -> str:
    """The first line of the error a task raised (Ray wraps it), or of Ray's own error."""
    cause = getattr(err, "cause", None) or err
    if isinstance(cause, InputError):
        return first_line(cause, 1000)
    text = str(cause).strip().splitlines()
    return text[-1] if text else repr(cause)


def _task(data: dict, run_dir: str, cache_dir: str, model: str, task: Task) -> None:
    """One task of the plan in a Ray worker: the run as the driver left it (the same directory
    and state, its inputs read back), each job in turn, one engine for its evaluations."""
    recipe = recipe_from_dict(data, f"{run_dir}/recipe.json")
    run = Run(
        recipe,
        Path(run_dir),
        Path(cache_dir),
        model=model,
        progress=False,
        say=lambda m: print(f"[{task.name}]{m}"),
    )
    run.generate()  # finished by the driver: reads back where the inputs are
    if task.home is not None:
        task.home.mkdir(parents=True, exist_ok=True)
        (task.home / "worker.pid").write_text(f"{os.getpid()}\n")
    processes = max(1, int(recipe.run.resources.num_gpus))
    try:
        run.execute_task(task, launch=_launch_shards if task.shards else None, processes=processes)
    except InputError as err:
        raise in_recipe_terms(err, *(run.current or (None, None))) from err


def _launch_shards(jobs: list[tuple[Any, Path]], progress: bool) -> None:
    """Each shard of a sharded evaluation as a Ray task (:data:`scd.eval.tasks.Launch`)."""
    import dataclasses

    import ray

    from scd.eval.tasks import run_task

    remote = ray.remote(run_task)
    refs = []
    for task, out in jobs:  # a shard loads its own model: never the parent's shared engine
        model = dataclasses.replace(task.model, shared=None)
        refs.append(remote.remote(dataclasses.replace(task, model=model), out, progress=False))
    ray.get(refs)
