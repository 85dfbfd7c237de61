"""What a training run reads of its recipe, typed (:class:`TrainingSpec`): the stages of
:func:`scd.train.trainer.train` -- TRL's config, the rows, the model, the bias measured during
training, the adapter kept -- are handed it instead of the whole recipe. The recipe itself goes
only where the run records it (``recipe.yaml``, the W&B run's config) and to the checks made
before any work (:meth:`scd.train.arms.base.Arm.problems`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scd.config.arms import ArenaOptions
from scd.config.schema import DataSpec, LoraSpec, Recipe, TrainSpec, WandbSpec
from scd.errors import InputError

__all__ = ["BiasCheck", "TrainingSpec"]


@dataclass(frozen=True)
class BiasCheck:
    """What the bias measured during training reads (``train.eval_every_steps``): scored as
    ``scd eval bias`` scores the trained model."""

    protocol: str  # eval.bias.protocol (scd.models.protocols); its text is also what trains
    rule: str | None  # eval.bias.rule (None: the protocol's own)
    system_prompt: str | None  # eval.system_prompt (None: the chat template's own)
    batch_size: int | None  # the hf engine's eval.batch_size (None: another engine evaluates)
    neutral_prompts: str | None  # capability.neutral_prompts: the KL's side (train.select best)


@dataclass(frozen=True)
class TrainingSpec:
    """The keys of a recipe that training reads, by section (each the recipe's own typed
    section): build it with :meth:`of`."""

    model: str  # a Hub id, a local directory or a GGUF file
    output_dir: Path
    quantization: str  # "none" or "4bit"
    train: TrainSpec
    lora: LoraSpec
    data: DataSpec
    wandb: WandbSpec
    arena: ArenaOptions  # the methods' own options (beta ...)
    bias: BiasCheck

    @classmethod
    def of(cls, recipe: Recipe) -> TrainingSpec:
        """The training spec of ``recipe``.

        Raises:
            InputError: no ``output_dir`` (``scd run`` sets one per arm).
        """
        if recipe.output_dir is None:
            raise InputError("recipe: output_dir: needed by scd train (scd run chooses its own)")
        options = getattr(recipe.eval, "bias", None)
        bias = BiasCheck(
            protocol=recipe.bias_protocol,
            rule=getattr(options, "rule", None),
            system_prompt=recipe.eval.system_prompt,
            batch_size=getattr(recipe.eval, "batch_size", None),
            neutral_prompts=recipe.capability.neutral_prompts,
        )
        return cls(
            model=recipe.model,
            output_dir=Path(recipe.output_dir),
            quantization=recipe.quantization,
            train=recipe.train,
            lora=recipe.lora,
            data=recipe.data,
            wandb=recipe.wandb,
            arena=recipe.arena,
            bias=bias,
        )
