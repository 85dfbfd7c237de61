"""What a run is to the plan it makes and the jobs it executes: :class:`PlanSource` (what
:func:`scd.pipeline.plan.make_plan` reads) and :class:`JobRunner` (what a job's work uses).
:class:`scd.pipeline.run.Run` is both; they are Protocols because the run imports the plan and
the jobs' modules, which therefore cannot import the run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from scd.config.vocabulary import SCD_ARM

if TYPE_CHECKING:
    from scd.config.engine import EngineSpec
    from scd.config.options import Options
    from scd.config.schema import Recipe, WandbSpec
    from scd.eval.benchmarks.base import Benchmark
    from scd.pipeline.state import RunState

__all__ = ["JobRunner", "PlanSource"]


@runtime_checkable
class PlanSource(Protocol):
    """What a plan is made from: a run with its shared inputs prepared."""

    recipe: Recipe
    dir: Path  # the run directory
    cache: Path  # the cache shared across runs (base-model results, the toy model)
    model: str  # the base model, resolved (a directory or Hub id)
    engine: EngineSpec
    state: RunState
    benchmarks: list[tuple[Benchmark, Options]]  # the enabled ones, with their options


@runtime_checkable
class JobRunner(PlanSource, Protocol):
    """What a job's work uses of the run executing it (:class:`scd.pipeline.run.Run`)."""

    progress: bool
    ran_stages: set[str]  # the stages that ran in this process
    prompts: Path | None  # the setting's training contact prompts
    eval_prompts: Path | None  # and its held-out ones

    def stage(
        self,
        name: str,
        outputs: list[Path],
        work: Callable[[], Any],
        cached: bool = False,
        section: str | None = None,
    ) -> Any: ...

    def wandb_of(self, n: int, arm: str = SCD_ARM, seed: int | None = None) -> WandbSpec: ...
