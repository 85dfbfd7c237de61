"""Run a long ``scd run`` study so that a machine replaced mid-way loses no finished arm.

    python validation/study.py RECIPE.yaml --outputs DIR --keep validation/NAME [--set K=V ...]

``scd run``'s own resume keeps what a run directory holds; this keeps what a *repository* holds.
It runs the recipe's plan task by task -- the base model, then each arm to its end (training,
evaluations, capability), the first seed of every arm before the second -- and after each task
writes the report of what has finished so far (``report.md``, ``tables/``) and, after each task
and every ``--every`` seconds in between, copies the run's result files into ``--keep`` (the
adapters' weights, checkpoints and tokenizer files stay behind: they are large, and no finished
stage reads them again; so do the prompt sets, which the run makes again in seconds). On a
machine where ``DIR`` holds no run yet, the kept files are copied back first, so that ``scd
run``'s stages that finished elsewhere are skipped (a stage is finished when ``state.json`` lists
it and its output exists) and an evaluation copied mid-way resumes at its last whole chunk
(:mod:`scd.eval.records`); an arm whose adapter or steering vector stayed behind with some of
its results still to come starts over. ``state.json`` records paths as given: run it from the
repository root with a relative ``DIR`` (``outputs``) and a relative model path, and the kept
files name no machine and resume on any.

Every ``--sample`` seconds it appends to ``--keep``/machine.jsonl the machine's busy CPU seconds
and this process's own (cumulative counters), so that a stage's run time can be reported with
what else ran beside it: ``python validation/study.py --times validation/NAME`` prints every
finished stage's seconds and the share of the machine's busy CPU that was not the study's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from scd.eval.erasure import ERASERS
from scd.eval.steering import VECTORS
from scd.pipeline.jobs import CapabilityJob, EraseJob, EvalJob, SteerJob, TrainJob
from scd.pipeline.launch import run_recipe
from scd.pipeline.plan import Plan, Task
from scd.pipeline.recipe import load_recipe
from scd.pipeline.run import Run
from scd.report.build import build_report

# weights, checkpoints and tokenizers; the prompt sets and a setting's SFT split ("prompts",
# "sft": megabytes, made again in seconds, the same bytes, by the stages that made them)
LEFT_BEHIND = ("*.safetensors", "*.bin", "*.pt", "*.pth", "checkpoint-*", "checkpoints")
LEFT_BEHIND += ("tokenizer.json", "vocab.json", "merges.txt", "*.lock", "worker.pid")
LEFT_BEHIND += ("prompts", "sft")
# the report's figures, and its HTML that holds them again (report.md and tables/ are kept; the
# study run again, every stage skipped, makes these)
LEFT_BEHIND += ("report.html", "figures")


def copy_results(source: Path, target: Path) -> None:
    """Every file under ``source`` but :data:`LEFT_BEHIND` into ``target`` (replaced whole)."""
    if not source.is_dir():
        return
    fresh, old = target.with_name(target.name + ".new"), target.with_name(target.name + ".old")
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(source, fresh, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)  # the copy before stays whole until the new one is in its place
    fresh.rename(target)
    shutil.rmtree(old, ignore_errors=True)


class TaskByTask:
    """The plan's tasks one after another, each to its end, keeping the results after each."""

    def __init__(self, keep: Path, every: float) -> None:
        self.keep, self.every = keep, every
        self.lock = threading.Lock()

    def execute(self, run: Run, plan: Plan) -> None:
        stop = threading.Event()
        saver = threading.Thread(target=self._save_every, args=(run, stop), daemon=True)
        saver.start()
        try:
            for job in plan.data:
                run.execute(job)
            tasks = sorted(plan.tasks, key=lambda t: (t.name != "base", _seed_rank(run, t)))
            reported = False
            for task in tasks:
                _start_over_if_lost(run, task)
                ran = not all(run.state.done(j.stage) for j in task.jobs if hasattr(j, "stage"))
                run.execute_task(task)
                self.save(run)
                print(f"kept: {task.name}", flush=True)
                if ran:  # a task finished earlier changed nothing in the report
                    self.report(run)
                    reported = True
            if not reported:  # every task had finished before: the report as this scd writes it
                self.report(run)
        finally:
            stop.set()
            saver.join()

    def _save_every(self, run: Run, stop: threading.Event) -> None:
        while not stop.wait(self.every):
            try:
                self.save(run)
            except (OSError, shutil.Error):  # a file renamed while copied: the next round
                continue

    def report(self, run: Run) -> None:
        """The report of what has finished so far, kept too; a failure is said, not fatal (the
        study's results come first)."""
        try:
            build_report(run.dir)
        except Exception as err:  # noqa: BLE001 - any error of the report: the study goes on
            print(f"the report so far failed: {type(err).__name__}: {err}", flush=True)
            return
        self.save(run)

    def save(self, run: Run) -> None:
        with self.lock:
            copy_results(run.dir, self.keep / "run")
            copy_results(run.cache / "base", self.keep / "cache-base")


def _weights(job: object) -> Path | None:
    """The file a task's results depend on that the kept files leave behind: a trained
    adapter's weights, a concept eraser's or a steering vector's."""
    if isinstance(job, TrainJob):
        return job.adapter / "adapter_model.safetensors"
    if isinstance(job, EraseJob):  # a SteerJob too: asked first
        return job.out / ERASERS
    if isinstance(job, SteerJob):
        return job.out / VECTORS
    return None


def _start_over_if_lost(run: Run, task: Task) -> None:
    """A task copied back with its adapter trained (or its steering vector or concept eraser
    computed) but not all its evaluations: the weights stayed on the machine that made them, so
    the task starts over -- the training (or the vector, the eraser) and every result of it,
    finished or not, so that no table mixes two trainings or two vectors (a vector computed
    again on other hardware differs in its last bits, and an evaluation's identity holds the
    vector's digest). A search's curve stays: its points are read back, only the vectors (the
    erasers) are computed again."""
    made = next((j for j in task.jobs if _weights(j) is not None), None)
    if made is None or made.stage not in run.state.stages:
        return
    if _weights(made).is_file():
        return
    results = [j for j in task.jobs if isinstance(j, EvalJob | CapabilityJob)]
    if all(run.state.done(j.stage) for j in results):  # all in: the weights are not needed
        return
    kinds = {TrainJob: "adapter's", EraseJob: "concept eraser's", SteerJob: "steering vector's"}
    what = kinds[type(made)]
    print(f"{task.name}: its {what} weights were not kept; the task starts over", flush=True)
    shutil.rmtree(made.adapter if isinstance(made, TrainJob) else made.out, ignore_errors=True)
    for job in results:
        shutil.rmtree(job.out, ignore_errors=True)


def cpu_sample() -> dict[str, float]:
    """Now, the machine's busy CPU seconds since boot (all cores; /proc/stat) and this process's
    own CPU seconds (every thread)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait
    own = os.times()
    return {"t": round(time.time(), 1), "busy": round(busy, 1), "own": round(own[0] + own[1], 1)}


def _sample_every(path: Path, every: float, stop: threading.Event) -> None:
    while True:
        with path.open("a") as f:
            f.write(json.dumps({**cpu_sample(), "cpus": os.cpu_count()}) + "\n")
        if stop.wait(every):
            return


def stage_times(keep: Path) -> list[dict[str, object]]:
    """Each finished stage of the kept run: its seconds and the share of the machine's busy CPU
    during it that other processes took (None: no samples inside it)."""
    state = json.loads((keep / "run" / "state.json").read_text())["stages"]
    log = keep / "machine.jsonl"
    samples = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    rows = []
    for name, s in sorted(state.items(), key=lambda kv: kv[1].get("started_at", 0)):
        inside = [x for x in samples if s["started_at"] <= x["t"] <= s["finished_at"]]
        pairs = [(a, b) for a, b in zip(inside, inside[1:]) if b["own"] >= a["own"]]  # one process
        busy = sum(b["busy"] - a["busy"] for a, b in pairs)
        own = sum(b["own"] - a["own"] for a, b in pairs)
        others = round(max(0.0, 1 - own / busy), 2) if busy > 0 else None
        rows.append({"stage": name, "seconds": s["seconds"], "others_share": others})
    return rows


def _seed_rank(run: Run, task: Task) -> int:
    """Where the task's training seed stands in ``arena.seeds`` (0: no seed, or no training)."""
    seeds = list(run.recipe.arena.seeds or [])
    seed = next((j.seed for j in task.jobs if isinstance(j, TrainJob)), None)
    return seeds.index(seed) if seed in seeds else 0


def main() -> None:
    if sys.argv[1:2] == ["--times"]:
        for row in stage_times(Path(sys.argv[2])):
            print(json.dumps(row))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("recipe")
    p.add_argument("--outputs", type=Path, required=True)
    p.add_argument("--keep", type=Path, required=True)
    p.add_argument("--every", type=float, default=600.0, help="seconds between copies")
    p.add_argument("--sample", type=float, default=120.0, help="seconds between CPU samples")
    p.add_argument("--set", action="append", default=[], dest="overrides")
    a = p.parse_args()
    recipe = load_recipe(a.recipe, a.overrides)
    run_dir, cache = a.outputs / recipe.run.name, a.outputs / "cache"
    if not (run_dir / "recipe.json").is_file() and (a.keep / "run" / "recipe.json").is_file():
        shutil.copytree(a.keep / "run", run_dir, dirs_exist_ok=True)
        if (a.keep / "cache-base").is_dir():
            shutil.copytree(a.keep / "cache-base", cache / "base", dirs_exist_ok=True)
        print(f"restored the kept results into {run_dir}", flush=True)
    keeper = TaskByTask(a.keep, a.every)
    stop = threading.Event()
    a.keep.mkdir(parents=True, exist_ok=True)
    sampler = threading.Thread(
        target=_sample_every, args=(a.keep / "machine.jsonl", a.sample, stop)
    )
    sampler.start()
    try:
        report = run_recipe(recipe, run_dir, cache, launcher=keeper)
    finally:
        stop.set()
        sampler.join()
    keeper.save(Run(recipe, run_dir, cache))  # the report, its tables and layout.json too
    print(report)


if __name__ == "__main__":
    sys.exit(main())
