"""``scd run RECIPE.yaml``: generate -> train every setting -> evaluate the base model and each
tuned model with one engine -> tables -> report, for one setting or a sweep of settings.

The model is loaded for evaluation once per run (:class:`~scd.eval.engines.SharedEngine`): vLLM
serves every adapter as a ``LoRARequest`` on one ``LLM``, transformers switches PEFT adapters on
one base model. Training comes first so that the evaluation engine (vLLM reserves most of the GPU
memory) never shares a GPU with a training run.

Layout of ``outputs/<run_id>/`` (``run_id``: ``run.name``, else the recipe file's name)::

    run.json  state.json                   the pinned recipe; the finished stages
    data/prompts/  data/eval_prompts/      contact prompts (eval_prompts: a source split's)
    data/stigma/                           stigma probe prompts (when the recipe asks for probes)
    setting-<N>/sft/                       SFT data + the setting's held-out prompts
    setting-<N>/adapter/                   the LoRA adapter (checkpoints/ while training)
    setting-<N>/eval/{bias,bbq,stigma-*}/  the tuned model's evaluations
    tables/  figures/  report.md  report.html

Base-model evaluations go to ``outputs/cache/base/`` keyed by model + data fingerprint (see
:mod:`scd.pipeline.state`): the base model is evaluated once per prompt set, on all of it, and each
setting's "before" is the slice of its held-out prompts, so a sweep of the 8 settings -- or 8
separate recipes over the same prompts -- evaluates the base once. The toy model (``model: toy``)
is cached the same way.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from scd.data_gen.settings import load_settings
from scd.data_gen.sft import prepare_sft
from scd.errors import InputError
from scd.eval.engines import SharedEngine
from scd.pipeline.inputs import in_recipe_terms, validate_inputs
from scd.pipeline.state import RunState, cache_key, model_fingerprint
from scd.train.recipe import Recipe, recipe_to_dict
from scd.vocabulary import RunLayout

__all__ = ["ensure_toy_model", "in_recipe_terms", "run_recipe", "settings_of", "validate_inputs"]


def settings_of(recipe: Recipe) -> list[int]:
    """The settings a run trains: ``run.settings``, else ``[data.setting]``."""
    return list(recipe.run.settings) if recipe.run.settings else [recipe.data.setting]


class _Run:
    """The stages of one run; each is skipped when ``state.json`` says it finished."""

    def __init__(
        self, recipe: Recipe, run_dir: Path, cache_dir: Path, progress: bool, say: Callable
    ) -> None:
        self.recipe, self.dir, self.cache = recipe, run_dir, cache_dir
        self.progress, self.say = progress, say
        self.ran = 0  # stages run by this invocation
        self.current: str | None = None  # the stage running (errors name it)
        self.launch: Any = None  # how the shards of a sharded evaluation run (None: in turn)
        self.train_processes = 1  # > 1: training under torchrun (a Ray task with several GPUs)
        self.started = time.time()
        self.state = RunState(run_dir, recipe_to_dict(recipe))
        self.model = recipe.model
        self.engine = recipe.eval.engine()
        self.shared: SharedEngine | None = None  # one engine for every evaluation of the run
        self.settings = load_settings(recipe.data.settings_file)

    def stage(
        self,
        name: str,
        outputs: list[Path],
        work: Callable[[], Any],
        cached: bool = False,
        **info: Any,
    ) -> None:
        """Run ``work`` unless the stage finished in this run directory; print its name and,
        when done, its time. A ``cached`` stage (its outputs live in the shared cache) whose
        outputs exist is taken from the cache, not run again (and the cache is not rewritten)."""
        if self.state.done(name):
            return
        started = time.perf_counter()
        if cached and all(p.exists() for p in outputs):
            self.say(f"  {name}: cached ({outputs[0].parent})")
            self.state.finish(name, outputs, started, cached=True, **info)
            return
        self.say(f"  {name} ...")
        self.ran += 1
        self.current = name
        work()
        self.current = None
        self.state.finish(name, outputs, started, **info)
        self.say(f"  {name}: done in {_duration(time.perf_counter() - started)}")

    def _where(self, name: str, default: Path) -> Path:
        """Where a cached stage's results are: where an earlier invocation put them when it
        finished (its cache may have been elsewhere), else ``default``."""
        return self.state.output(name).parent if self.state.done(name) else default

    # -- inputs --------------------------------------------------------------------------------
    def build_model(self) -> None:
        """Resolve the model to a loadable name: a GGUF file is converted once (cached by its
        sha256), ``toy`` builds the planted-bias model once (cached by its spec)."""
        if self.recipe.model != "toy":
            from scd.models import resolve_model

            self.model = resolve_model(self.recipe.model, key="model", say=self.say)
            return
        path = ensure_toy_model(self.recipe.toy_model, self.cache, self.say, self.progress)
        self.ran += path.stat().st_mtime > self.started  # built by this invocation
        self.model = str(path)

    def _step(self, name: str, output: Path, work: Callable[[], Any]) -> None:
        """A step of :func:`~scd.data_gen.sft.prepare_sft` as a stage of the run."""
        self.stage(name, [output], lambda: self._warn(work()))

    def generate(self) -> None:
        self.prompts, self.eval_prompts = prepare_sft(
            self.recipe.data, self.dir / "data", settings_of(self.recipe), step=self._step
        )
        self.stigma = self.dir / "data" / "stigma"
        if self.recipe.eval.stigma.probes:
            from scd.data_gen.stigma_probes import generate_stigma

            limit = self.recipe.eval.stigma.limit_conditions
            self.stage(
                "stigma_prompts",
                [self.stigma / "manifest.json"],
                lambda: generate_stigma(self.stigma, limit_conditions=limit),
            )

    # -- evaluations ---------------------------------------------------------------------------
    def base_jobs(self) -> list[tuple[str, dict[str, Any], Callable[..., Any]]]:
        """The base model's bias evaluations: every prompt of each prompt set."""
        from scd.eval.bias import evaluate_bias
        from scd.io import sha256_file

        ev, jobs = self.recipe.eval, []
        sources = {"bias": self.prompts, "bias_eval_prompts": self.eval_prompts}
        for name, prompts in sources.items() if ev.bias.enabled else ():
            if prompts is not None:
                opts = {"limit": ev.bias.limit, "seed": ev.seed, "denominator": ev.bias.denominator}
                key = {**opts, "prompts": sha256_file(prompts / "prompts.parquet")}
                evaluate = partial(evaluate_bias, self.model, prompts, shards=ev.shards,
                                   launch=self.launch, **opts)  # fmt: skip
                jobs.append((name, key, evaluate))
        return jobs

    def other_jobs(self) -> list[tuple[str, dict[str, Any], Callable[..., Any]]]:
        """BBQ and the stigma probes, as ``(name, what the base's cache key holds, evaluate)``."""
        from scd.eval.bbq import evaluate_bbq
        from scd.eval.stigma import evaluate_stigma
        from scd.io import sha256_file

        ev, jobs = self.recipe.eval, []
        if ev.bbq.enabled:
            opts = {"categories": ev.bbq.categories, "limit": ev.bbq.limit, "seed": ev.seed}
            bbq = partial(evaluate_bbq, self.model, ev.bbq.data, **opts)
            jobs.append(("bbq", {"data": ev.bbq.data, **opts}, bbq))
        for probe in ev.stigma.probes:
            key = {"prompts": sha256_file(self.stigma / "manifest.json")}
            jobs.append((f"stigma-{probe}", key, partial(evaluate_stigma, probe, self.model,
                                                         self.stigma)))  # fmt: skip
        return jobs

    def evaluate(self, jobs: list, adapter: str | None, where: Path, prefix: str) -> dict[str, str]:
        """Each job as the stage ``prefix/name``, for the base model (``adapter`` None: results
        cached by model, engine identity and the job's key) or a tuned one (into ``where``);
        return ``{name: result dir}``."""
        done = {}
        for name, key, evaluate in jobs:
            if adapter is None:
                digest = cache_key(kind=name, model=model_fingerprint(self.model),
                                   **self.engine.cache_identity(), **key)  # fmt: skip
                out = self._where(f"{prefix}/{name}", self.cache / "base" / f"{name}-{digest}")
            else:
                out = where / name
            run = partial(evaluate, adapter=adapter, engine=self.engine, progress=self.progress,
                          shared=self.shared)  # fmt: skip
            self.stage(f"{prefix}/{name}", [out / "summary.json"], lambda r=run, o=out: r(o),
                       cached=adapter is None)  # fmt: skip
            done[name] = str(out)
        return done

    def _warn(self, manifest: dict[str, Any]) -> dict[str, Any]:
        for warning in manifest.get("warnings", []):
            self.say(f"  warning: {warning}")
        return manifest

    def _base_subset(self, n: int) -> set[str]:
        """The prompt sets of the base model's ``eval.bias.limit`` subset that setting ``n``'s
        held-out prompts come from, so that a tuned model is scored on the same prompts."""
        from scd.data_gen.contact import read_prompts
        from scd.eval.bias import stratified_sets

        source = self.settings[n].split == "source" and self.eval_prompts is not None
        table = read_prompts(self.eval_prompts if source else self.prompts)
        return stratified_sets(table, self.recipe.eval.bias.limit, self.recipe.eval.seed)

    # -- one setting ---------------------------------------------------------------------------
    def train_setting(self, n: int) -> dict[str, str]:
        """Setting ``n``'s SFT data and LoRA adapter: ``{"sft": dir, "adapter": dir}``."""
        from scd.train.trainer import train

        r, d = self.recipe, self.recipe.data
        where = self.dir / f"setting-{n}"
        sft, adapter = where / "sft", where / "adapter"
        prepare_sft(d, self.dir / "data", [n], sft, step=self._step)
        group = r.wandb.group or self.dir.name
        tuned = dataclasses.replace(
            r,
            model=self.model,
            output_dir=str(adapter),
            data=dataclasses.replace(d, sft=str(sft), prompts=None, descriptors=None, setting=n),
            wandb=dataclasses.replace(r.wandb, group=group, run_name=f"{group}/setting-{n}"),
        )
        resume = (adapter / "checkpoints").is_dir()
        if self.train_processes > 1:  # one process per GPU of the setting's Ray task
            work = partial(_torchrun_train, tuned, self.train_processes, resume, where)
        else:
            work = partial(train, tuned, resume=resume, progress=self.progress)
        self.stage(f"setting-{n}/train", [adapter / "train_manifest.json"], work)
        return {"sft": str(sft), "adapter": str(adapter)}

    def evaluate_setting(self, n: int, trained: dict[str, str]) -> dict[str, str]:
        """The tuned model of setting ``n`` on its held-out prompts (+ BBQ, stigma probes)."""
        from scd.eval.bias import evaluate_bias

        ev, where = self.recipe.eval, self.dir / f"setting-{n}"
        heldout, adapter = Path(trained["sft"]) / "heldout", trained["adapter"]
        ran, jobs = self.ran, []
        if ev.bias.enabled:
            opts: dict[str, Any] = {"denominator": ev.bias.denominator}
            if ev.bias.limit is not None:  # the held-out part of the base model's subset
                opts["sets"] = self._base_subset(n)
            jobs.append(("bias", {}, partial(evaluate_bias, self.model, heldout, **opts)))
        jobs += self.other_jobs()
        results = self.evaluate(jobs, adapter, where / "eval", f"setting-{n}/eval")
        if self.recipe.wandb.enabled and self.ran > ran:  # into the setting's training run
            from scd.report.wandb_log import log_tuned_results

            group = self.recipe.wandb.group or self.dir.name
            wandb = dataclasses.replace(self.recipe.wandb, group=group,
                                        run_name=f"{group}/setting-{n}")  # fmt: skip
            log_tuned_results(dataclasses.replace(self.recipe, wandb=wandb), adapter, results)
        return results

    def share_engine(self, adapters: list[str]) -> None:
        """Evaluate the base model and every adapter with one engine, loaded on first use."""
        import gc
        import sys

        from scd.models import resolve_model

        gc.collect()  # the trainers' models
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.shared = SharedEngine(self.engine, resolve_model(self.model), adapters=adapters)

    def close_engine(self) -> None:
        if self.shared is not None:
            self.shared.close()


def _torchrun_train(recipe: Recipe, processes: int, resume: bool, where: Path) -> None:
    """``scd train`` under ``torchrun``, one process per GPU, on the setting's recipe."""
    import subprocess
    import sys

    import yaml

    path = where / "train_recipe.yaml"
    path.write_text(yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={processes}", "-m", "scd", "train", str(path)]  # fmt: skip
    done = subprocess.run([*cmd, *(["--resume"] if resume else [])], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"training under torchrun failed (exit {done.returncode}): {path}")


def ensure_toy_model(
    spec: Any, cache: Path, say: Callable[[str], None] = print, progress: bool = False
) -> Path:
    """The planted-bias toy model of a recipe's ``toy_model`` section, built once into
    ``cache/toy-model/<key of the spec>`` (``scd run`` and ``scd train`` share it)."""
    from scd.eval.toy_model import build_toy_model

    key = cache_key(kind="toy_model", bias_axes=spec.bias_axes, seed=spec.seed)
    path = cache / "toy-model" / key
    if (path / "manifest.json").is_file():
        say(f"  toy model: cached ({path})")
        return path
    axes = ", ".join(spec.bias_axes) or "no axis"
    say(f"  toy model (planted bias: {axes}) -> {path} ...")
    started = time.perf_counter()
    build_toy_model(path, bias_axes=tuple(spec.bias_axes), seed=spec.seed, progress=progress)
    say(f"  toy model: built in {_duration(time.perf_counter() - started)}")
    return path


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds // 60:.0f} min {seconds % 60:.0f} s"


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

    ``launcher="local"``: every setting is trained first; then one engine (``share_engine``)
    loads the base model once and evaluates the base and each adapter on it
    (``share_engine=False``: a fresh engine per evaluation stage; benchmarks compare the two).
    ``launcher="ray"``: the base evaluation and each setting (SFT data, training, its
    evaluations) are Ray tasks on the cluster at ``address`` (None: a local one), side by side;
    see :mod:`scd.pipeline.ray_launcher`. Either way the same stages, state and resume.

    Raises:
        InputError: a recipe the pipeline cannot run (checked before any work), a run directory
            of another recipe, or bad input found by a stage.
        RunFailed: a Ray task failed (the others' results are kept).
    """
    if launcher == "ray":
        from scd.pipeline.ray_launcher import import_ray

        import_ray()  # before any work
    validate_inputs(recipe)
    run = _Run(recipe, Path(run_dir), Path(cache_dir), progress, say)
    try:
        started = time.perf_counter()
        run.state.pin()
        where = f" on Ray ({address or 'a local cluster'})" if launcher == "ray" else ""
        settings = ", ".join(map(str, settings_of(recipe)))
        say(f"scd run -> {run.dir} (settings {settings}){where}")
        run.build_model()
        run.generate()
        if launcher == "ray":
            from scd.pipeline.ray_launcher import run_on_ray

            base, tuned = run_on_ray(run, address)
        else:
            base, tuned = _run_here(run, share_engine)
        return _finish(run, base, tuned, started)
    except InputError as err:
        raise in_recipe_terms(err, run.current) from err


def _run_here(run: _Run, share_engine: bool) -> tuple[dict[str, str], dict[int, dict]]:
    """Every setting trained in turn, then one engine evaluates the base and each adapter."""
    trained = {n: run.train_setting(n) for n in settings_of(run.recipe)}
    if share_engine:  # trained first: the evaluation engine never shares a GPU with training
        run.share_engine([info["adapter"] for info in trained.values()])
    try:
        base = run.evaluate(run.base_jobs() + run.other_jobs(), None, run.cache / "base", "base")
        tuned = {n: {**info, "evals": run.evaluate_setting(n, info)} for n, info in trained.items()}
    finally:
        run.close_engine()
    return base, tuned


def _finish(run: _Run, base: dict[str, str], tuned: dict[int, dict], started: float) -> Path:
    """``layout.json``, the report and the W&B summary run of a run whose stages are done."""
    from scd.report.build import build_report

    recipe, run_dir, say = run.recipe, run.dir, run.say

    layout: RunLayout = {
        "model": run.model,
        "prompts": str(run.prompts),
        "eval_prompts": str(run.eval_prompts) if run.eval_prompts else None,
        "base": base,
        "settings": {str(n): info for n, info in tuned.items()},
    }
    from scd.io import json_text, write_json

    path = run_dir / "layout.json"
    if not path.is_file() or path.read_text() != json_text(layout):
        write_json(path, layout)
    report = run_dir / "report.html"
    run.stage("report", [report], lambda: build_report(run_dir))
    if recipe.wandb.enabled:
        from scd.report.wandb_log import log_run

        run.stage("wandb", [run_dir / "report.md"], lambda: log_run(run_dir, recipe))
    if run.ran == 0:
        say(f"all stages finished earlier; nothing to do: {report}")
    else:
        took = _duration(time.perf_counter() - started)
        say(f"done in {took}: {run_dir / 'report.md'}, {report}")
    return report
