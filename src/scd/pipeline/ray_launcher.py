"""``scd run RECIPE --launcher ray [--address ADDR]``: the settings of a run side by side on Ray.

The driver (the ``scd run`` process) pins the run, builds the model and generates the prompts,
as the local launcher does. Then the base model's evaluations are one Ray task, and each setting
-- its SFT data, its training, its evaluations -- is another, all submitted at once and each
asking for ``run.resources`` (``num_cpus``, ``num_gpus``; ``max_retries``: Ray retries a task
whose worker died). Placement, retries and resources are Ray's. The report is built by the
driver when every task has finished.

Every task works in the same run directory and cache, which must be a path all nodes see (a
shared file system): the stages, ``state.json`` (written under a file lock) and resume are those
of the local launcher, so killing the driver and running the command again skips the finished
stages and resumes the others (a training at its last checkpoint, an evaluation at its last
chunk). A task that fails does not stop the others; the run then fails naming its settings.

With ``eval.shards: N`` the base model's bias evaluation is cut into N slices, each a Ray task
scoring into its own record log, merged in prompt order (:func:`scd.eval.tasks.run_task`).
A setting whose task asks for more than one GPU trains under ``torchrun``, one process per GPU.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from scd.errors import InputError, RunFailed, first_line
from scd.pipeline.recipe import in_recipe_terms, recipe_from_dict
from scd.pipeline.run import Run

__all__ = ["INSTALL_HINT", "import_ray", "run_on_ray"]

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
        raise InputError(f"Ray is not installed ({INSTALL_HINT})", key="launcher",
                         value="ray") from None  # fmt: skip
    return ray


def _worker_env() -> dict[str, str]:
    """The driver's HF/W&B/scd settings for the workers; secrets stay on each node."""
    secret = ("TOKEN", "KEY", "SECRET", "PASSWORD")
    return {k: v for k, v in os.environ.items()
            if k.startswith(_ENV) and not any(s in k for s in secret)}  # fmt: skip


def run_on_ray(run: Run, address: str | None) -> tuple[dict[str, str], dict[int, dict]]:
    """The base evaluations and every setting of ``run`` (its inputs generated) as Ray tasks;
    ``(base results, {setting: results})``.

    Raises:
        InputError: Ray is not installed, or the cluster cannot be reached.
        RunFailed: a task failed, after Ray's retries (the others finished first).
    """
    ray = import_ray()
    if not ray.is_initialized():
        try:
            env = {"env_vars": _worker_env()}
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR, runtime_env=env)  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise InputError(f"cannot reach the Ray cluster ({err})", key="address",
                             value=address) from None  # fmt: skip
    r = run.recipe.run.resources
    remote = ray.remote(num_cpus=r.num_cpus, num_gpus=r.num_gpus, max_retries=r.max_retries)
    job = (run.recipe.to_dict(), str(run.dir), str(run.cache), run.model)
    refs = {n: remote(_setting_task).remote(*job, n) for n in run.recipe.settings}
    refs["base"] = remote(_base_task).remote(*job)  # last: the settings take the first slots
    run.say(f"  {len(refs)} Ray tasks: settings {', '.join(str(n) for n in refs if n != 'base')}"
            ", the base model")  # fmt: skip
    results, failed = {}, []
    for name, ref in refs.items():
        try:
            results[name] = ray.get(ref)
        except ray.exceptions.RayError as err:
            what = "the base model" if name == "base" else f"setting {name}"
            failed.append(f"{what}: {_cause(err)}")
    if failed:
        raise RunFailed("\n".join(failed))
    return results.pop("base"), results


def _cause(err: BaseException) -> str:
    """The first line of the error a task raised (Ray wraps it), or of Ray's own error."""
    cause = getattr(err, "cause", None) or err
    if isinstance(cause, InputError):
        return first_line(cause, 1000)
    text = str(cause).strip().splitlines()
    return text[-1] if text else repr(cause)


def _worker_run(data: dict, run_dir: str, cache_dir: str, model: str, name: str) -> Run:
    """The run as a worker sees it: the same directory and state, the prepared inputs."""
    recipe = recipe_from_dict(data, f"{run_dir}/recipe.json")
    run = Run(recipe, Path(run_dir), Path(cache_dir), progress=False,
              say=lambda m: print(f"[{name}]{m}"))  # fmt: skip
    run.model = model
    run.generate()  # finished by the driver: reads back where the inputs are
    run.train_processes = max(1, int(recipe.run.resources.num_gpus))
    return run


def _in_terms(run: Run, work: Any) -> Any:
    try:
        return work()
    except InputError as err:
        raise in_recipe_terms(err, *(run.current or (None, None))) from err
    finally:
        run.close_engine()


def _base_task(data: dict, run_dir: str, cache_dir: str, model: str) -> dict[str, str]:
    run = _worker_run(data, run_dir, cache_dir, model, "base")
    run.launch = _launch_shards
    run.share_engine([])
    return _in_terms(run, lambda: run.evaluate(None, None))


def _setting_task(data: dict, run_dir: str, cache_dir: str, model: str, n: int) -> dict[str, Any]:
    run = _worker_run(data, run_dir, cache_dir, model, f"setting {n}")
    (run.dir / f"setting-{n}").mkdir(parents=True, exist_ok=True)
    (run.dir / f"setting-{n}" / "worker.pid").write_text(f"{os.getpid()}\n")

    def work() -> dict[str, Any]:
        trained = run.train_setting(n)
        run.share_engine([trained["adapter"]])
        return {**trained, "evals": run.evaluate_setting(n, trained)}

    return _in_terms(run, work)


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
