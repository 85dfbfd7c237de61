"""One runner for every resumable evaluation: a benchmark makes a small task object
(:class:`EvalTask`), and :func:`run_task` owns what they all share -- the pinned ``run.json``, the
record log, loading the model only when work remains, the chunk loop with its progress, and the
atomic result files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import scd  # scd.__version__ is read when a run is recorded, not at import (PEP 562)
from scd.config.engine import EngineSpec
from scd.errors import InputError
from scd.eval.engines import SharedEngine, engine_spec, make_engine
from scd.eval.records import RecordLog, check_run_config, merge_timing, read_records
from scd.io import atomic_file, json_text
from scd.models.formatting import Formatter, load_tokenizer

__all__ = [
    "CausalModel",
    "CausalTask",
    "EvalTask",
    "Launch",
    "check_writable",
    "run_task",
    "write_results",
]


class EvalTask(Protocol):
    """A benchmark as :func:`run_task` runs it.

    ``config`` is pinned in ``run.json`` (a re-run with another config is refused); ``work`` is
    the deterministic item list, scored ``chunk_size`` items at a time.
    """

    name: str  # the progress bar's label
    unit: str  # what one work item is called ("prompt", "item")
    config: dict[str, Any]
    defaults: dict[str, Any]  # what a key of config that an earlier run.json lacks stood for
    work: Sequence[dict[str, Any]]
    chunk_size: int

    def load(self, progress: bool) -> None:
        """Load the model; called only when work remains, before ``run.json`` is written."""

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One record per row, in order."""

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The summary of all records (``run`` is added by the runner)."""

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        """Result files besides ``summary.json``: name -> text."""


Launch = Callable[[list[tuple[Any, Path]], bool], None]  # runs (task, out) jobs: in turn, on Ray


def run_task(
    task: EvalTask,
    out: Path | str,
    *,
    progress: bool = True,
    shards: int = 1,
    launch: Launch | None = None,
) -> dict[str, Any]:
    """Run (or resume) ``task`` into ``out``; write ``summary.json`` and the task's files.

    A different earlier run in ``out`` is refused before the model loads, and nothing is
    written before it has loaded. Killed at any point, a re-run resumes without losing or
    duplicating a record (:class:`~scd.eval.records.RecordLog`).

    ``shards`` > 1 cuts the work into that many contiguous slices, each run (and resumable) as a
    task of its own into ``out/shards/<i>-of-<n>`` by ``launch`` (default: one after the other;
    ``scd run --launcher ray``: as Ray tasks), then merges their records in work order into
    ``out/records.jsonl``: the same records as one unsharded run.
    """
    out = check_writable(out)
    check_run_config(out, task.config, task.defaults, write=False)
    if shards > 1:
        return _run_shards(task, out, shards, launch or _in_turn, progress)
    log = RecordLog(out / "records.jsonl", task.chunk_size, len(task.work))
    if log.done < len(task.work):
        task.load(progress)
        new = [p for p in (out, out / "run.json") if not p.exists()]
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(
                f"cannot write there ({err.strerror or err})", key="out", value=out
            ) from None
        check_run_config(out, task.config, task.defaults)
        try:
            _score_all(task, log, progress)
        except InputError:  # e.g. a server that cannot score: nothing half-written is left
            for path in reversed(new if log.done == 0 else []):
                with contextlib.suppress(OSError):
                    path.rmdir() if path.is_dir() else path.unlink()
            raise
    summary = task.summarize(log.read())
    summary["run"] = {
        **_ran_before(out),
        **task.config,
        **getattr(task, "recorded", {}),
        "scd_version": scd.__version__,
    }
    write_results(out, {"summary.json": json_text(summary), **task.render(summary)})
    return summary


def check_writable(out: Path | str, *, directory: bool = True) -> Path:
    """Refuse an output path that cannot be written, before any model loads (#76): the nearest
    existing path at or above ``out`` must be a directory this process may write into. Missing
    directories below it are made when the results are written, as before.

    ``directory``: ``out`` names a directory (a file there is refused); False: a file, which
    may be replaced.

    Raises:
        InputError: one line naming ``--out`` and what is in the way.
    """
    out = Path(out)
    near = next((p for p in (out, *out.parents) if p.exists()), Path.cwd())
    if near == out and not out.is_dir():
        if directory:
            raise InputError("exists and is not a directory", key="out", value=out)
        near = out.parent
    if not near.is_dir():
        raise InputError(
            f"cannot write there ({near} is a file, not a directory)", key="out", value=out
        )
    if not os.access(near, os.W_OK | os.X_OK):
        raise InputError(f"cannot write there ({near} is not writable)", key="out", value=out)
    return out


def _ran_before(out: Path) -> dict[str, Any]:
    """``ran`` of an earlier summary in ``out``: a finished run summarized again loads no engine."""
    try:
        ran = json.loads((out / "summary.json").read_text())["run"]["ran"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {"ran": ran}


def _in_turn(jobs: list[tuple[Any, Path]], progress: bool) -> None:
    for task, out in jobs:
        run_task(task, out, progress=progress)


def _run_shards(
    task: Any, out: Path, shards: int, launch: Launch, progress: bool
) -> dict[str, Any]:
    merged, n = out / "records.jsonl", len(task.work)
    if not merged.is_file() or merged.read_bytes().count(b"\n") != n:
        cuts = [n * i // shards for i in range(shards + 1)]
        jobs = []
        for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
            config = {**task.config, "n_items": b - a, "shard": f"{i + 1}/{shards}"}
            part = dataclasses.replace(task, work=task.work[a:b], config=config)
            jobs.append((part, out / "shards" / f"{i + 1}-of-{shards}"))
        out.mkdir(parents=True, exist_ok=True)
        check_run_config(out, task.config, task.defaults)  # the shards' directories go inside
        launch(jobs, progress)
        merge_timing([(a, shard) for a, (_, shard) in zip(cuts, jobs)], out)
        with atomic_file(merged) as tmp, open(tmp, "wb") as sink:
            for _, shard in jobs:
                sink.write((shard / "records.jsonl").read_bytes())
    summary = task.summarize(read_records(merged))
    first = _ran_before(out / "shards" / f"1-of-{shards}")  # where the first slice ran
    summary["run"] = {
        **_ran_before(out),
        **first,
        **task.config,
        **getattr(task, "recorded", {}),
        "shards": shards,
        "scd_version": scd.__version__,
    }
    write_results(out, {"summary.json": json_text(summary), **task.render(summary)})
    return summary


@dataclass
class CausalTask:
    """The fields every task has, and the load of a causal LM that most tasks score with
    (``self.engine``, ``self.fmt``); subclasses add ``name``, ``unit`` and the scoring."""

    config: dict[str, Any]
    work: list[dict[str, Any]]
    chunk_size: int
    model: CausalModel
    defaults: dict[str, Any] = field(default_factory=dict, kw_only=True)

    def load(self, progress: bool) -> None:
        self.engine, self.fmt = self.model.load(progress)

    @property
    def recorded(self) -> dict[str, Any]:
        """What the summary records besides the pinned config: the whole engine spec (its
        speed-only options may change between a run and its resumption), and where the engine
        loaded in this process ran (``ran``: the device and dtype "auto" became)."""
        ran = getattr(getattr(self, "engine", None), "ran", None)
        return {"engine": dataclasses.asdict(self.model.spec), **({"ran": ran} if ran else {})}


def _score_all(task: EvalTask, log: RecordLog, progress: bool) -> None:
    from scd.progress import Progress

    shown = Progress(task.name, len(task.work), done=log.done, unit=task.unit, enabled=progress)
    try:
        for lo, hi in log.chunks():
            with shown.part(hi - lo):  # the engine's batches move the line within the chunk
                records = task.score(task.work[lo:hi])
            log.append(records)
    finally:
        shown.close()


SWITCHED = ("steer", "erase")  # the hf engine's hooks: switched per evaluation, not loaded


@dataclass
class CausalModel:
    """A causal LM to load for an evaluation: where it is, how to run it, and an optional
    engine shared by several evaluations of the same model (built on first use, switched to
    ``adapter``); without one the engine is made here.

    ``model`` may be a directory, a Hub id, a GGUF file (converted once, see :mod:`scd.models`)
    or ``toy``, built with ``toy_words`` as tokens of their own (a benchmark's options).
    """

    model: str
    adapter: str | None = None
    spec: EngineSpec = field(default_factory=engine_spec)
    shared: SharedEngine | None = None
    toy_words: tuple[str, ...] = ()

    def load(self, progress: bool) -> tuple[Any, Formatter]:
        """The running engine (on ``adapter``) and the prompt formatter."""
        from scd.models import resolve_model

        model = resolve_model(self.model, toy_words=self.toy_words)
        if progress and sys.stderr.isatty():  # piped stderr keeps bad input to one line
            extra = f" + adapter {self.adapter}" if self.adapter else ""
            print(f"loading {model}{extra} ({self.spec.backend}) ...", file=sys.stderr, flush=True)
        tokenizer = load_tokenizer(model, self.adapter)
        fmt = Formatter(tokenizer, self.spec.system_prompt)
        hooks = {k: getattr(self.spec, k, None) for k in SWITCHED}  # per evaluation, as adapters
        if self.shared is not None:
            running = (_loaded_as(self.shared.spec), self.shared.model)
            if running != (_loaded_as(self.spec), model):
                raise ValueError(
                    f"a shared engine of {self.shared.model} ({self.shared.spec}) "
                    f"cannot evaluate {model} ({self.spec})"
                )
            return self.shared.get(tokenizer, self.adapter, **hooks), fmt
        adapters = [self.adapter] if self.adapter else []
        running = make_engine(self.spec, model, tokenizer=tokenizer, adapters=adapters)
        running.use_adapter(self.adapter)
        return running, fmt


def _loaded_as(spec: EngineSpec) -> dict[str, Any]:
    """What a loaded engine is: its options less what it switches per evaluation."""
    return {k: v for k, v in spec.engine_options().items() if k not in SWITCHED}


def write_results(out: Path, files: dict[str, str]) -> None:
    """Write each ``name -> text`` into ``out`` through a temporary file and a rename."""
    for name, text in files.items():
        with atomic_file(out / name) as tmp:
            tmp.write_text(text, encoding="utf-8")
