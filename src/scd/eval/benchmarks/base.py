"""A benchmark as the rest of scd sees it: one object with a name, an options dataclass, an
evaluation, headline numbers, a table of several runs and a run-report section.

``scd eval <name>``, ``scd report <name>``, a recipe's ``eval.<name>`` section, ``scd run``'s
evaluations, its report and its W&B summaries all loop over the registry
(:mod:`scd.eval.benchmarks`). The options dataclass generates the benchmark's flags and its recipe
keys (:mod:`scd.config.options`); :class:`BenchmarkOptions` holds what every benchmark takes.

In ``scd run`` a benchmark by default evaluates the base model and every tuned model on the same
data (:meth:`Benchmark.jobs`) and its section of the report is :meth:`Benchmark.table` over them,
base first; the bias benchmark overrides both (held-out prompts per setting, Tables 10-14).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from scd.config.engine import EngineSpec
from scd.config.options import Options, Pin, option, positive
from scd.config.settings import Setting
from scd.config.vocabulary import RunLayout
from scd.errors import InputError
from scd.eval.benchmarks.columns import Column
from scd.eval.benchmarks.tables import Table, save_table
from scd.eval.engines import SharedEngine, engine_spec, require_adapter
from scd.eval.tasks import CausalModel, EvalTask, Launch, run_task

__all__ = [
    "Benchmark",
    "BenchmarkOptions",
    "BenchmarkJob",
    "RunData",
]


@dataclass
class BenchmarkOptions(Options):
    """What every benchmark takes (a benchmark's own options subclass this)."""

    enabled: bool = option(
        False, "scd run: evaluate the base and every tuned model", flag=False, pin=Pin.NEVER
    )
    chunk_size: int = option(512, "items per resumable chunk", check=positive)
    scores_only: ClassVar[str | None] = None  # e.g. "masked LMs": cannot run in scd run

    def problems(self) -> Iterator[tuple[str, str]]:
        yield from super().problems()
        if self.enabled and self.scores_only:
            yield (
                "enabled",
                (f"scores {self.scores_only} only; scd run tunes and evaluates a causal LM"),
            )


class RunData(Protocol):
    """What ``scd run`` gives a benchmark (:class:`scd.pipeline.run.Run`)."""

    dir: Path  # the run directory (``data/`` holds its generated inputs)
    prompts: Path  # the contact prompt set
    eval_prompts: Path | None  # a source split's second prompt set
    settings: dict[int, Setting]

    def stage(self, name: str, outputs: list[Path], work: Callable[[], Any]) -> None:
        """Run ``work`` once, as a resumable stage of the run."""


@dataclass(frozen=True)
class BenchmarkJob:
    """One evaluation in ``scd run``: ``name`` is its stage's last part, its result directory's
    name and its key in ``layout.json``; a base-model result is cached under its
    :meth:`Benchmark.identity`."""

    name: str
    benchmark: Benchmark
    options: Any


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Benchmark:
    """Subclasses set the class attributes and implement :meth:`task`, :meth:`headline` and
    :meth:`table` (and may refine :meth:`describe` and the ``scd run`` hooks)."""

    name: ClassVar[str]  # scd eval <name>, eval.<name>, the result directory
    help: ClassVar[str]  # one line for --help
    Options: ClassVar[type[BenchmarkOptions]]
    model_kinds: ClassVar[tuple[str, ...]] = ("causal",)  # causal LMs run through the engines
    base_label: ClassVar[str] = "Base"  # the base model's row in the run report
    headline_table: ClassVar[str | None] = None  # tables/<name>.md that scd run prints at its end
    chat_turn: ClassVar[bool] = True  # its prompts are chat turns: the system prompt applies
    arena_columns: ClassVar[tuple[Column, ...]] = ()  # what arena() gives, as the table shows it
    arena_reading: ClassVar[str] = ""  # how to read its arena columns, under the table
    # its arena columns resample clusters of items: arena() takes unit= (template or cell)
    clustered: ClassVar[bool] = False
    # a reference dataset of scd.reference_data that its ``data`` option defaults to: fetched and
    # verified into $SCD_DATA_DIR/<name> when missing (None: the benchmark reads no such data)
    dataset: ClassVar[str | None] = None

    def task(self, model: CausalModel, options: Any) -> EvalTask:
        """The resumable task of ``options`` for ``model`` (:func:`scd.eval.tasks.run_task`); its
        ``config`` is :meth:`identity` plus what the task found (``n_items``, hashes of what
        it loaded)."""
        raise NotImplementedError

    # -- what a result depends on ----------------------------------------------------------------
    def kind(self) -> dict[str, str]:
        """What sort of result this is, first in its identity: ``{"kind": "<name>_eval"}``."""
        return {"kind": f"{self.name}_eval"}

    def inputs(self, options: Any) -> dict[str, Path]:
        """The files a result reads besides the model, by name: their SHA-256 is in its identity
        as ``<name>_sha256`` (where they are is not). Default: none."""
        return {}

    def toy_words(self, options: Any) -> tuple[str, ...]:
        """The words of its options that the toy model's prompts lack (``--model toy`` gives
        each a token of its own, else they all read ``<unk>`` and no option can be told from
        another). Default: none (the options are the toy's own, or whole texts are scored)."""
        return ()

    def runs_on(self, spec: EngineSpec) -> EngineSpec:
        """The engine options as this benchmark's prompts use them: without the system prompt
        where they are not chat turns."""
        return spec if self.chat_turn else dataclasses.replace(spec, system_prompt=None)

    def identity(
        self,
        options: Any,
        model: str,
        adapter: str | None,
        spec: EngineSpec,
        *,
        cache: bool = False,
    ) -> dict[str, Any]:
        """What a result of ``options`` on ``model`` (+ ``adapter``) run by ``spec`` depends on,
        in one place: its :meth:`kind`, the model, the engine's and the options' pinned values
        (:meth:`~scd.config.options.Options.identity`) and the hashes of its :meth:`inputs`.
        An evaluation pins it in ``run.json`` (a resumed run must match; the file also names
        the options pinned only when changed, at their defaults); with ``cache`` it is
        the key of a base-model result in ``scd run``'s cache: ``model`` its fingerprint, the
        engine's "auto" dtype resolved, options that change only the summary included."""
        from scd.io import sha256_file

        spec = self.runs_on(spec)
        return {
            **self.kind(),
            "model": model,
            "adapter": adapter,
            **(spec.cache_identity() if cache else spec.identity()),
            **options.identity(summary=cache),
            **{f"{k}_sha256": sha256_file(p) for k, p in self.inputs(options).items()},
        }

    def identity_defaults(self, options: Any, spec: EngineSpec) -> dict[str, Any]:
        """What a key of :meth:`identity` that an earlier ``run.json`` lacks stood for: the
        default (an option pinned only when changed, a key added later)."""
        return {
            **type(spec)().identity(every=True),
            **type(options)().identity(every=True),
        }

    def dataset_files(self, options: Any) -> list[str] | None:
        """The files of :attr:`dataset` that ``options`` read (None: every file)."""
        return None

    def dataset_inputs(self, options: Any) -> dict[str, Path]:
        """The files of its data that ``options`` read, by name, whose bytes say which declared
        dataset they are (``run.json``'s ``dataset``). Default: :meth:`inputs`."""
        return self.inputs(options)

    def with_data(self, options: Any, say: Any = None) -> Any:
        """``options`` with ``data`` given: as they are, or (no ``data``, a benchmark of a
        :attr:`dataset`) a copy whose ``data`` is the dataset's directory, its files fetched and
        verified where missing (:func:`scd.reference_data.ensure`; ``say`` hears of each fetch).

        Raises:
            InputError: a file that cannot be fetched or is not the pinned one (one line)."""
        if self.dataset is None or getattr(options, "data", None) is not None:
            return options
        from scd.reference_data import ensure

        where = ensure(self.dataset, self.dataset_files(options), say=say)
        return dataclasses.replace(options, data=str(where))

    def evaluate(
        self,
        model: str,
        out: Path | str,
        *,
        adapter: str | None = None,
        engine: EngineSpec | None = None,
        shared: SharedEngine | None = None,
        progress: bool = True,
        shards: int = 1,
        launch: Launch | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Evaluate (or resume evaluating) ``model`` (+ ``adapter``, unmerged) into ``out``;
        ``options`` are :attr:`Options`' fields. Returns the summary (``OUT/summary.json``).

        ``engine``: how the model runs (default: hf, its defaults); ``shared``: an engine of
        ``model`` already loaded for several evaluations (``scd run``); ``shards``, ``launch``:
        the work in slices, see :func:`~scd.eval.tasks.run_task`.

        Raises:
            InputError: an unknown or bad option, a missing input, a bad adapter, or an ``out``
                that holds another run. Nothing is written before the model has loaded.
        """
        known = {f.name: f for f in dataclasses.fields(self.Options)}
        for name in options:
            if name not in known:
                raise InputError(f"not an option of {self.name} ({', '.join(known)})", key=name)
        opts = self.with_data(self.Options(**options).check(), say=_say if progress else None)
        for f in known.values():
            if f.metadata.get("required") and getattr(opts, f.name) is None:
                raise InputError(f"needed by {self.name}", key=f.name)
        require_adapter(adapter)
        spec = (engine or engine_spec()).check()
        self._say_if_unsteered(getattr(spec, "steer", None))
        words = self.toy_words(opts) if model == "toy" else ()
        task = self.task(CausalModel(model, adapter, self.runs_on(spec), shared, words), opts)
        task.defaults = self.identity_defaults(opts, spec)
        if self.dataset is not None:  # which declared dataset its files are, by their bytes
            from scd.reference_data import provenance

            read = self.dataset_inputs(opts)
            task.config["dataset"] = task.defaults["dataset"] = provenance(read)
        return run_task(task, out, progress=progress, shards=shards, launch=launch)

    def _say_if_unsteered(self, steer: str | None) -> None:
        """One line on stderr where ``steer`` (a steering directory) adds its vector from the
        assistant's turn on and this benchmark's prompts are plain text, with no such turn: its
        results are then the unsteered model's."""
        if steer is None or self.chat_turn:
            return
        from scd.eval.steering import load_steering

        if load_steering(steer).positions == "answer":
            _say(
                f"{self.name}: not steered -- {steer} adds its vector from the assistant's turn "
                f"on (positions: answer) and {self.name} scores plain text with no such turn, "
                "so its results are the unsteered model's (a steering at every position acts "
                "here: arena.steer_positions: all)"
            )

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The few numbers a result is known by (W&B summaries, the command's last line)."""
        raise NotImplementedError

    def prompts_note(self, summary: dict[str, Any], options: dict[str, Any]) -> str | None:
        """What the base model's result (``summary``, with the recipe's ``options``) says of
        the run's contact prompts, for the run report's header (None: nothing)."""
        return None

    def describe(self, summary: dict[str, Any]) -> str:
        """The command's last line, before ``-> OUT/tables.md``."""
        return ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in self.headline(summary).items()
        )

    def table(self, runs: dict[str, Path | str]) -> Table:
        """Finished runs side by side (``scd report <name> --runs NAME=DIR ...``)."""
        raise NotImplementedError

    # -- in scd run ----------------------------------------------------------------------------
    def check_inputs(self, options: Any) -> None:
        """Refuse inputs that cannot be read, before any work (:class:`InputError`)."""

    def prepare(self, run: RunData, options: Any) -> Any:
        """The options with the run's inputs filled in (generating them as a stage if needed)."""
        return options

    def jobs(
        self, run: RunData, options: Any, setting: tuple[int, Path] | None
    ) -> list[BenchmarkJob]:
        """The evaluations of the base model (``setting`` None) or of setting ``(n, sft dir)``'s
        tuned model: by default one, on the same data."""
        return [BenchmarkJob(self.name, self, options)]

    def runs(self, layout: RunLayout) -> dict[str, str]:
        """The result directories of the base and each tuned model, by row label (base first)."""
        base = layout["base"]
        runs = {self.base_label: base[self.name]} if self.name in base else {}
        for n, info in layout["settings"].items():
            if self.name in info["evals"]:
                runs[f"Setting {n}"] = info["evals"][self.name]
        return runs

    def base_job(self, sft: Path) -> str:
        """The base model's job (a key of ``layout.json``'s ``base``) that a setting's arms are
        compared with in the arena, given the setting's SFT directory. Default: this
        benchmark's own job."""
        return self.name

    def arena(self, result: Path, base: Path, items: Path) -> dict[str, Any]:
        """This benchmark's columns of the arena table (``scd run`` with ``arms:``) for one arm:
        ``result`` is the arm's result directory, ``base`` the base model's result of the same
        job, ``items`` a result directory whose items every arm is compared on (the base model
        may have answered more: the bias benchmark's base answers every prompt, the arms the
        held-out ones). Flat ``{column: value}``; a column named ``*_p`` is a p-value against
        the base model on the same items, Holm-corrected across arms by the arena; values
        unrounded (the table rounds them once). :attr:`arena_columns` says how the table shows
        them. A :attr:`clustered` benchmark's ``arena`` also takes ``unit=`` (the cluster unit
        of its intervals and tests: :data:`scd.eval.benchmarks.clusters.UNITS`). Default: none."""
        return {}

    def flips(self, result: Path, base: Path, items: Path) -> Any:
        """The items of ``items`` whose answer changed between the base model's result ``base``
        and ``result``, a ``pandas.DataFrame`` of one row each with both answers (a W&B table of
        the tuned run). Default: None."""
        return None

    def report(self, layout: RunLayout, tables: Path, figures: dict[str, bytes]) -> list[str]:
        """The run report's section: :meth:`table` over :meth:`runs`."""
        runs = self.runs(layout)
        if not runs:
            return []
        table = self.table(runs)
        save_table(tables, table)
        figures.update(table.figures)
        return [table.markdown, ""]
