"""``scd run RECIPE.yaml``: generate -> train every setting -> evaluate the base model and each
tuned model with one engine -> tables -> report, in this process or on Ray.

In this process (``launcher="local"``) every setting is trained first, then the model is loaded
for evaluation once (:class:`~scd.eval.engines.SharedEngine`): vLLM serves every adapter as a
``LoRARequest`` on one ``LLM``, transformers switches PEFT adapters on one base model. Training
comes first so that the evaluation engine (vLLM reserves most of the GPU memory) never shares a
GPU with a training run. On Ray: :mod:`scd.pipeline.ray_launcher`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from scd.config.schema import Recipe
from scd.errors import InputError
from scd.pipeline.ray_launcher import import_ray, run_on_ray
from scd.pipeline.recipe import in_recipe_terms, validate_inputs
from scd.pipeline.run import Run

__all__ = ["run_recipe"]


def run_recipe(
    recipe: Recipe,
    run_dir: Path | str,
    cache_dir: Path | str,
    *,
    progress: bool = True,
    say: Callable[[str], None] = print,
    share_engine: bool = True,
    launcher: str = "local",
    address: str | None = None,
) -> Path:
    """Run (or resume) every stage of ``recipe`` in ``run_dir``; return the report's path.

    ``launcher``: ``"local"`` (see the module docstring; ``share_engine=False``: a fresh engine
    per evaluation stage, for benchmarks comparing the two), or ``"ray"``: the base evaluation and
    each setting (SFT data, training, its evaluations) as Ray tasks on the cluster at ``address``
    (None: a local one). Either way the same stages, state and resume.

    Raises:
        InputError: a recipe the pipeline cannot run (checked before any work), a run directory
            of another recipe, or bad input found by a stage.
        RunFailed: a Ray task failed (the others' results are kept).
    """
    if launcher == "ray":
        import_ray()  # before any work
    validate_inputs(recipe)
    run = Run(recipe, Path(run_dir), Path(cache_dir), progress=progress, say=say)
    try:
        started = time.perf_counter()
        run.state.pin()
        where = f" on Ray ({address or 'a local cluster'})" if launcher == "ray" else ""
        settings = ", ".join(map(str, recipe.settings))
        say(f"scd run -> {run.dir} (settings {settings}){where}")
        if run.state.stages:  # a resumed run says what it will not do again
            done = list(run.state.stages)
            say(f"  resuming: {len(done)} stages finished earlier are kept ({', '.join(done[:5])}"
                f"{', ...' if len(done) > 5 else ''})")  # fmt: skip
        run.build_model()
        run.generate()
        if launcher == "ray":
            base, tuned = run_on_ray(run, address)
        else:
            base, tuned = _run_here(run, share_engine)
        return run.finish(base, tuned, started)
    except InputError as err:
        raise in_recipe_terms(err, *(run.current or (None, None))) from err


def _run_here(run: Run, share_engine: bool) -> tuple[dict[str, str], dict[int, dict]]:
    """Every setting trained in turn, then one engine evaluates the base and each adapter."""
    trained = {n: run.train_setting(n) for n in run.recipe.settings}
    if share_engine:
        run.share_engine([info["adapter"] for info in trained.values()])
    try:
        base = run.evaluate(None, None)
        tuned = {n: {**info, "evals": run.evaluate_setting(n, info)} for n, info in trained.items()}
    finally:
        run.close_engine()
    return base, tuned
