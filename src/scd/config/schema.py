"""The recipe schema: :class:`Recipe`, one dataclass per section, each field a key (its default,
check and help).

A recipe (``recipes/**/*.yaml``) is one training run (``scd train``) or a whole pipeline
(``scd run``). Its defaults reproduce the SCD paper's public code: LoRA r=64, alpha=16,
dropout=0.1; 1 epoch; batch 6 x grad-accum 2; lr 3e-4 constant; max_grad_norm 0.3; gradient
checkpointing; paged AdamW 32-bit (CUDA); bf16; seed 42; 10k train / 5k eval rows per contact
type. The paper also set 3% warmup, which transformers' ``constant`` schedule ignores: the default
here is 0, so that a recipe says what runs (``constant_with_warmup`` warms up).

The ``data:`` section is :mod:`scd.config.sft_data`'s, ``lora:`` and ``train:`` are
:mod:`scd.config.training`'s (``train:`` keys are ``SFTConfig``'s own names and reach it as they
are); this module holds the others and names all of them. ``eval:`` holds the options of the
engine ``eval.backend`` names (its subclass of :class:`~scd.config.engine.EngineSpec`) and one
section per benchmark, whose options class the benchmark registers (:func:`eval_spec_class`).
Reading, overriding and checking a recipe: :mod:`scd.config.loader`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from scd.config.arms import ArenaOptions, arena_spec_class
from scd.config.engine import DEFAULT_BACKEND, EngineSpec, engine_class
from scd.config.options import non_negative, option, positive
from scd.config.sft_data import SEED, STYLES, DataSpec, SFTOptions
from scd.config.training import LoraSpec, TrainSpec

__all__ = [
    "SEED",
    "STYLES",
    "CapabilitySpec",
    "DataSpec",
    "EvalSpec",
    "LoraSpec",
    "Recipe",
    "ResourcesSpec",
    "RunSpec",
    "SFTOptions",
    "ToyModelSpec",
    "TrainSpec",
    "WandbSpec",
    "eval_spec_class",
]


@dataclass
class CapabilitySpec:
    """What tuning cost each arm of the arena: the KL divergence from the base model's next-token
    distribution on neutral prompts, and lm-evaluation-harness tasks when listed."""

    neutral_prompts: str | None = option(
        None, "YAML of neutral prompts with reference replies (default: scd's own 48)"
    )
    lm_eval_tasks: list[str] | None = option(None, "lm-evaluation-harness tasks to score each arm")
    lm_eval_include_path: str | None = option(None, "a directory of your own lm-eval tasks")
    lm_eval_limit: int | None = option(None, "items per lm-eval task", check=positive)
    batch_size: int = option(8, "sequences per forward pass", check=positive, speed=True)


@dataclass
class WandbSpec:
    """Weights & Biases tracking; offline automatically without a key or network."""

    enabled: bool = option(True, "log to W&B (offline without a key or network)")
    project: str = option("scd", "the W&B project")
    entity: str | None = option(None, "the W&B entity (team or user; default: your own)")
    run_name: str | None = option(None, "the W&B run's name (default: the run's and arm's)")
    group: str | None = option(None, "the W&B group of a run's runs (default: the run id)")
    log_adapter: bool = option(False, "upload each trained adapter as a W&B artifact")


@dataclass
class ToyModelSpec:
    """``model: toy``: the planted-bias toy model that ``scd run`` builds (and caches)."""

    bias_axes: list[str] = option(
        None,
        "the toy descriptors' axes the bias is planted on",
        factory=lambda: ["religion", "nationality"],
    )
    seed: int = option(0, "the toy model's training seed")
    steer_layer: int | None = option(
        None,
        "also plant a steering direction at this decoder layer's output (0-2; the toy then has "
        "4 layers): a known ground truth for the steer arm",
        check=lambda v: None if v is None or v in (0, 1, 2) else "expected 0, 1 or 2",
    )


@dataclass
class EvalSpec(EngineSpec):
    """What ``scd run`` evaluates, and with which engine: the engine keys (as ``scd eval``'s
    flags: backend, dtype and the chosen engine's own, :func:`eval_spec_class`) and one section
    per registered benchmark."""

    shards: int = option(
        1,
        "scd run: the base model's bias evaluation in N slices (each a task under Ray)",
        check=positive,
        speed=True,
    )


@functools.cache
def _eval_class(sections: tuple[tuple[str, type], ...], engine: type[EngineSpec]) -> type:
    fields = [(name, cls, field(default_factory=cls)) for name, cls in sections]
    cls = dataclasses.make_dataclass("EvalSpec", fields, bases=(EvalSpec, engine))
    cls.engine_class = engine
    return cls


def eval_spec_class(
    sections: Mapping[str, type] | None = None, backend: str = DEFAULT_BACKEND
) -> type[EvalSpec]:
    """The ``eval`` section: the keys of engine ``backend`` (its options class) and a
    sub-section per benchmark (name -> its options class)."""
    return _eval_class(tuple((sections or {}).items()), engine_class(backend).Options)


@dataclass
class ResourcesSpec:
    """What each task of ``scd run --launcher ray`` asks Ray for (Ray's own task options)."""

    num_cpus: float = option(1.0, "CPUs per task", check=non_negative)
    num_gpus: float = option(
        0.0, "GPUs per task (> 1: training runs under torchrun)", check=non_negative
    )
    max_retries: int = option(
        3, "times a task whose worker crashed runs again (Ray's default)", check=non_negative
    )


@dataclass
class RunSpec:
    """``scd run``: the run's name (its directory), the settings it sweeps, and what each
    setting's task asks for under ``--launcher ray``."""

    name: str | None = option(None, "the run's name (default: the recipe file's name)")
    settings: list[int] | None = option(
        None, "the settings it sweeps, one adapter each (default: [data.setting])"
    )
    resources: ResourcesSpec = option(factory=ResourcesSpec, speed=True)


@dataclass
class Recipe:
    """One training run (``scd train``), or a whole pipeline (``scd run``)."""

    model: str = field(
        metadata={
            "help": 'a local directory, a Hub id, a GGUF file, or "toy" (the planted-bias model)'
        }
    )
    output_dir: str | None = option(None, "scd train writes here; scd run uses outputs/<run_id>/")
    data: DataSpec = field(default_factory=DataSpec)
    lora: LoraSpec = field(default_factory=LoraSpec)
    quantization: Literal["none", "4bit"] = option("none", "4bit: bitsandbytes NF4 QLoRA")
    train: TrainSpec = field(default_factory=TrainSpec)
    wandb: WandbSpec = option(factory=WandbSpec, speed=True)  # tracking: never pinned
    toy_model: ToyModelSpec = field(default_factory=ToyModelSpec)
    eval: EvalSpec = field(default_factory=lambda: eval_spec_class()())
    run: RunSpec = field(default_factory=RunSpec)
    arms: list[str] | None = option(None, "the arena: arms compared per setting (scd.config.arms)")
    arena: ArenaOptions = field(default_factory=lambda: arena_spec_class()())  # arms' own keys
    capability: CapabilitySpec = field(default_factory=CapabilitySpec)

    @property
    def bias_protocol(self) -> str:
        """The evaluation protocol of ``eval.bias`` (:mod:`scd.models.protocols`): training
        uses its text, so that it trains what the bias evaluation scores."""
        bias = getattr(self.eval, "bias", None)
        return bias.protocol if bias is not None else "scd"

    @property
    def settings(self) -> list[int]:
        """The settings a run trains: ``run.settings``, else ``[data.setting]``."""
        return list(self.run.settings) if self.run.settings else [self.data.setting]

    @property
    def arm_names(self) -> list[str]:
        """The arms a run compares: ``arms`` with ``base`` first; none without ``arms``."""
        if not self.arms:
            return []
        return ["base", *(a for a in dict.fromkeys(self.arms) if a != "base")]

    def to_dict(self) -> dict[str, Any]:
        """The resolved recipe as plain data, its keys only (for the run directory, W&B)."""
        return _keys(self)


def _keys(section: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if f.metadata.get("spread"):  # its keys are the section's own (TrainSpec.trl)
            out.update(copy.deepcopy(value))
        elif f.metadata.get("key", True):
            out[f.name] = _keys(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
    return out
