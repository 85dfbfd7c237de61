"""The typed jobs of a run's plan (:mod:`scd.pipeline.plan` groups them in tasks): a setting's
SFT data or an arm's rows (:class:`DataJob`), an adapter's training (:class:`TrainJob`), the steer
and erase arms' searches (:class:`SteerJob`, :class:`EraseJob`), one benchmark job of one arm
(:class:`EvalJob`), an arm's capability cost (:class:`CapabilityJob`), a tuned arm's results into
its W&B run (:class:`TrackJob`) and its adapter to the Hub (:class:`PushJob`).

A job's ``phase`` is ``own_model`` (work that loads a model of its own: training, the capability
measures) or ``engine`` (evaluations by the run's evaluation engine, and what follows them).
Every job but a :class:`TrackJob` is one resumable stage of the run (its ``stage`` name in
``state.json``), so a plan executed again skips what finished and resumes the rest; a
``TrackJob`` writes no file of the run (it adds finished results to a W&B run's summary) and
runs whenever its evaluations ran in the process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "CapabilityJob",
    "DataJob",
    "EraseJob",
    "EvalJob",
    "Job",
    "PushJob",
    "SteerJob",
    "TrackJob",
    "TrainJob",
]

Phase = Literal["own_model", "engine"]


@dataclass(frozen=True)
class DataJob:
    """A setting's SFT data (``arm`` None) or an arm's own rows made from it."""

    stage: str
    setting: int
    arm: str | None
    out: Path
    phase: Phase = "own_model"


@dataclass(frozen=True)
class TrainJob:
    """An arm's LoRA adapter: ``method`` is the registered method (TRL's trainer) that trains
    it on the rows in ``data``."""

    stage: str
    setting: int
    arm: str
    method: str
    data: Path
    adapter: Path
    phase: Phase = "own_model"
    seed: int | None = None  # the arena's seeds: TRL's seed of this adapter (None: train.seed)


@dataclass(frozen=True)
class SteerJob:
    """An arm's steering vector, and the layer and scale it is added at, chosen on the
    setting's validation prompts (:func:`scd.eval.steering_search.search_steering`)."""

    stage: str
    setting: int
    arm: str
    sft: Path  # the setting's SFT data: its train rows make the vector, its validation choose
    out: Path
    phase: Phase = "own_model"


@dataclass(frozen=True)
class EraseJob(SteerJob):
    """An arm's concept eraser, and the layers it erases at, chosen on the setting's validation
    prompts (:func:`scd.eval.erasure_search.search_erasure`)."""


@dataclass(frozen=True)
class EvalJob:
    """One benchmark job (:class:`scd.eval.benchmarks.base.BenchmarkJob`: its name and options)
    of one arm: the base model (``cached``: the result lives in the shared cache), an adapter,
    the base model with a system prompt, or it steered."""

    stage: str
    benchmark: str
    name: str
    options: Any
    out: Path
    adapter: Path | None = None
    system_prompt: str | None = None
    cached: bool = False
    phase: Phase = "engine"
    steer: Path | None = None  # a steering directory added by the hf engine
    erase: Path | None = None  # an eraser directory applied by the hf engine


@dataclass(frozen=True)
class CapabilityJob:
    """What an arm costs: the KL divergence from the base model on neutral prompts (and
    lm-evaluation-harness tasks when the recipe lists them)."""

    stage: str
    out: Path
    adapter: Path | None = None
    system_prompt: str | None = None
    phase: Phase = "own_model"
    steer: Path | None = None
    erase: Path | None = None


@dataclass(frozen=True)
class TrackJob:
    """A tuned arm's results into the summary of the W&B run that trained it (when any of its
    evaluations ran in this process)."""

    setting: int
    arm: str
    adapter: Path
    evals: tuple[tuple[str, str, Path], ...]  # (job name, stage, result directory)
    before: tuple[tuple[str, Path], ...] = ()  # (job name, the base model's result of it)
    phase: Phase = "engine"
    seed: int | None = None


@dataclass(frozen=True)
class PushJob:
    """A tuned arm's adapter to its Hub repository (``train.push_to_hub``), with a model card
    holding its evaluations against the base model's on the same items."""

    stage: str
    repo: str
    adapter: Path
    evals: tuple[tuple[str, Path], ...]  # (job name, result directory)
    before: tuple[tuple[str, Path], ...] = ()  # (job name, the base model's result of it)
    phase: Phase = "engine"  # after its task's evaluations


Job = DataJob | TrainJob | SteerJob | EraseJob | EvalJob | CapabilityJob | TrackJob | PushJob
