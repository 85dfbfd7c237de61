"""A run of ``scd run RECIPE``: its directory, its stages and their state, for one setting or a
sweep. The launchers (:mod:`scd.pipeline.launch`: in this process; :mod:`scd.pipeline.ray_launcher`:
as Ray tasks) drive a :class:`Run`; the same stages, state and resume either way.

Layout of ``outputs/<run_id>/`` (``run_id``: ``run.name``, else the recipe file's name)::

    recipe.json  state.json  layout.json   the pinned recipe; the finished stages; where each
                                            result is (and the model's fingerprint)
    data/prompts/  data/eval_prompts/      contact prompts (eval_prompts: a source split's)
    data/stigma*/                          stigma probe prompts (when the recipe asks for probes)
    setting-<N>/sft/                       SFT data + the setting's held-out prompts
    setting-<N>/adapter/                   the LoRA adapter (checkpoints/ while training)
    setting-<N>/eval/<job>/                the tuned model's evaluations (one per benchmark)
    tables/  figures/  report.md  report.html

Base-model evaluations go to ``outputs/cache/base/`` keyed by the model's fingerprint, the engine
options that change answers, and the job's options and data: the base model is evaluated once per
prompt set, on all of it, and each setting's "before" is the slice of its held-out prompts, so a
sweep of the 8 settings -- or 8 recipes over the same prompts -- evaluates the base once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from scd.config.settings import load_settings
from scd.data_gen.sft import prepare_sft
from scd.eval.benchmarks import REGISTRY
from scd.eval.engines import SharedEngine
from scd.io import cache_key
from scd.models import model_fingerprint
from scd.pipeline.state import RunState

__all__ = ["Run", "duration"]


def duration(seconds: float) -> str:
    """``12.3 s`` or ``4 min 5 s``."""
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds // 60:.0f} min {seconds % 60:.0f} s"


class Run:
    """The stages of one run of ``recipe`` in ``run_dir``; each is skipped when ``state.json``
    says it finished. Base-model results are cached in ``cache_dir``."""

    def __init__(self, recipe: Any, run_dir: Path, cache_dir: Path, *, progress: bool = True,
                 say: Callable[[str], None] = print) -> None:  # fmt: skip
        self.recipe, self.dir, self.cache = recipe, Path(run_dir), Path(cache_dir)
        self.progress, self.say = progress, say
        self.ran = 0  # stages run by this invocation
        self.current: tuple[str, str | None] | None = None  # the stage running, its section
        self.launch: Any = None  # how the shards of a sharded evaluation run (None: in turn)
        self.train_processes = 1  # > 1: training under torchrun (a Ray task with several GPUs)
        self.started = time.time()
        self.state = RunState(self.dir, recipe.to_dict())
        self.model = recipe.model
        self.engine = recipe.eval.engine()
        self.shared: SharedEngine | None = None  # one engine for every evaluation of the run
        self.settings = load_settings(recipe.data.settings_file)
        self.prompts: Path | None = None
        self.eval_prompts: Path | None = None
        self.benchmarks: list[tuple[Any, Any]] = []  # (benchmark, its options), enabled ones

    def stage(self, name: str, outputs: list[Path], work: Callable[[], Any], cached: bool = False,
              section: str | None = None, **info: Any) -> None:  # fmt: skip
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
        path = ensure_toy_model(toy.bias_axes, toy.seed, self.cache, self.say, self.progress)
        self.ran += path.stat().st_mtime > self.started  # built by this invocation
        self.model = str(path)

    def _step(self, name: str, output: Path, work: Callable[[], Any]) -> None:
        """A step of :func:`~scd.data_gen.sft.prepare_sft` as a stage of the run."""
        self.stage(name, [output], lambda: self._warn(work()))

    def _warn(self, manifest: dict[str, Any]) -> None:
        for warning in manifest.get("warnings", []):
            self.say(f"  warning: {warning}")

    def generate(self) -> None:
        """The prompt sets, and each enabled benchmark's inputs (generated once)."""
        self.prompts, self.eval_prompts = prepare_sft(
            self.recipe.data, self.dir / "data", self.recipe.settings, step=self._step
        )
        self.benchmarks = []
        for name, bench in REGISTRY.items():
            options = getattr(self.recipe.eval, name, None)
            if options is not None and options.enabled:
                self.benchmarks.append((bench, bench.prepare(self, options)))

    # -- evaluations ---------------------------------------------------------------------------
    def evaluate(self, setting: tuple[int, Path] | None, adapter: str | None) -> dict[str, str]:
        """Every enabled benchmark's evaluations of the base model (``setting`` None: results
        cached by model, engine identity and the job's key) or of setting ``(n, sft dir)``'s
        tuned model (into the setting's ``eval/``); return ``{job name: result dir}``."""
        prefix = "base" if setting is None else f"setting-{setting[0]}/eval"
        done = {}
        for bench, options in self.benchmarks:
            for job in bench.jobs(self, options, setting):
                name = f"{prefix}/{job.name}"
                if setting is not None:
                    out = self.dir / prefix / job.name
                elif self.state.done(name):  # where it went then (the cache may have moved since)
                    out = self.state.output(name).parent
                else:
                    digest = cache_key(kind=job.name, model=model_fingerprint(self.model),
                                       **self.engine.cache_identity(), **job.key)  # fmt: skip
                    out = self.cache / "base" / f"{job.name}-{digest}"
                work = partial(job.benchmark.evaluate, self.model, out, adapter=adapter,
                               engine=self.engine, shared=self.shared, progress=self.progress,
                               shards=self.recipe.eval.shards if setting is None else 1,
                               launch=self.launch, **dataclasses.asdict(job.options))  # fmt: skip
                self.stage(name, [out / "summary.json"], work, cached=setting is None,
                           section=f"eval.{bench.name}")  # fmt: skip
                done[job.name] = str(out)
        return done

    # -- one setting ---------------------------------------------------------------------------
    def train_setting(self, n: int) -> dict[str, str]:
        """Setting ``n``'s SFT data and LoRA adapter: ``{"sft": dir, "adapter": dir}``."""
        from scd.train.trainer import train

        r, d = self.recipe, self.recipe.data
        where = self.dir / f"setting-{n}"
        sft, adapter = where / "sft", where / "adapter"
        prepare_sft(d, self.dir / "data", [n], sft, step=self._step)
        tuned = dataclasses.replace(
            r, model=self.model, output_dir=str(adapter),
            data=dataclasses.replace(d, sft=str(sft), prompts=None, descriptors=None, setting=n),
            wandb=self.wandb_of(n),
        )  # fmt: skip
        resume = (adapter / "checkpoints").is_dir()
        if self.train_processes > 1:  # one process per GPU of the setting's Ray task
            work = partial(torchrun_train, tuned, self.train_processes, resume, where)
        else:
            work = partial(train, tuned, resume=resume, progress=self.progress)
        self.stage(f"setting-{n}/train", [adapter / "train_manifest.json"], work)
        return {"sft": str(sft), "adapter": str(adapter)}

    def wandb_of(self, n: int) -> Any:
        """The W&B section of setting ``n``'s runs: the run's group, ``<group>/setting-<n>``."""
        group = self.recipe.wandb.group or self.dir.name
        return dataclasses.replace(self.recipe.wandb, group=group,
                                   run_name=f"{group}/setting-{n}")  # fmt: skip

    def evaluate_setting(self, n: int, trained: dict[str, str]) -> dict[str, str]:
        """The tuned model of setting ``n`` on every enabled benchmark; its results go into the
        summary of the W&B run that trained it."""
        ran = self.ran
        results = self.evaluate((n, Path(trained["sft"])), trained["adapter"])
        if self.recipe.wandb.enabled and self.ran > ran:
            from scd.report.wandb_log import log_tuned_results

            recipe = dataclasses.replace(self.recipe, wandb=self.wandb_of(n))
            log_tuned_results(recipe, trained["adapter"], results)
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

    # -- the end -------------------------------------------------------------------------------
    def finish(self, base: dict[str, str], tuned: dict[int, dict], started: float) -> Path:
        """``layout.json``, the report and the W&B summary run of a run whose stages are done;
        return the report's path."""
        from scd.io import json_text, write_json
        from scd.report.build import build_report

        layout = {
            "model": self.model, "fingerprint": model_fingerprint(self.model),
            "prompts": str(self.prompts),
            "eval_prompts": str(self.eval_prompts) if self.eval_prompts else None,
            "base": base, "settings": {str(n): info for n, info in tuned.items()},
        }  # fmt: skip
        path = self.dir / "layout.json"
        if not path.is_file() or path.read_text() != json_text(layout):
            write_json(path, layout)
        report = self.dir / "report.html"
        self.stage("report", [report], lambda: build_report(self.dir))
        if self.recipe.wandb.enabled:
            from scd.report.wandb_log import log_run

            self.stage("wandb", [self.dir / "report.md"], lambda: log_run(self.dir, self.recipe))
        table10 = self.dir / "tables" / "table10.md"
        if table10.is_file():  # the run's headline: bias before and after, per setting
            self.say("\n" + table10.read_text().split("\n", 2)[2].strip() + "\n")
        if self.ran == 0:
            self.say(f"all stages finished earlier; nothing to do: {report}")
        else:
            took = duration(time.perf_counter() - started)
            self.say(f"done in {took}: {self.dir / 'report.md'}, {report}")
        return report


def torchrun_train(recipe: Any, processes: int, resume: bool, where: Path) -> None:
    """``scd train`` under ``torchrun``, one process per GPU, on the setting's recipe."""
    import subprocess
    import sys

    import yaml

    path = where / "train_recipe.yaml"
    path.write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={processes}", "-m", "scd", "train", str(path)]  # fmt: skip
    done = subprocess.run([*cmd, *(["--resume"] if resume else [])], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"training under torchrun failed (exit {done.returncode}): {path}")
