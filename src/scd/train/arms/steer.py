"""The ``steer`` arm: no training -- a steering vector computed from the setting's training
prompts (the mean difference of the residual stream between their unbiased and biased answers)
and added, from the assistant's turn on (or at every position), at the layer and scale of the
highest mean validation margin within a KL bound (:mod:`scd.eval.steering_search`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from scd.config.options import Options, non_negative, option
from scd.train.arms.base import Arm, Problem

if TYPE_CHECKING:
    from scd.config.schema import Recipe

__all__ = ["Steer", "SteerOptions", "check_layers"]

# Both signs: which way a vector lowers bias is measured, not assumed (on Qwen2.5-Coder-1.5B-
# Instruct, the plain-mean vector of an earlier scd raised bias when added: VALIDATION.md)
SCALES = (-8.0, -4.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 4.0, 8.0)


def _scales(value: Any) -> str | None:
    if not value or not all(math.isfinite(s) for s in value):
        return "expected a list of finite scales (either sign)"
    return None


def check_layers(value: Any) -> str | None:
    """The check of a grid of layers: each a layer or a non-empty list of layers."""
    if not value or any(isinstance(item, list) and not item for item in value):
        return "expected a list of layers, each a layer or a non-empty list of layers"
    return None


@dataclass
class SteerOptions(Options):
    steer_layers: list[int | list[int]] | None = option(
        None,
        "steer arm: the decoder layers to try, each a layer or a list of layers steered "
        "together, each by its own vector (default: four single layers spread over the middle "
        "half)",
        check=check_layers,
    )
    steer_scales: list[float] = option(
        None,
        "steer arm: the scales to try at each layer, either sign (a negative one subtracts the "
        "vector; 0, the base model, always)",
        factory=lambda: list(SCALES),
        check=_scales,
    )
    steer_max_kl: float | None = option(
        0.5,
        "steer arm: the largest KL from the base model on neutral prompts (nats/token) a kept "
        "layer and scale may have (none: no bound)",
        check=non_negative,
    )
    steer_positions: Literal["answer", "all"] = option(
        "answer",
        "steer arm: where the vector is added -- answer: from the assistant's turn on (the chat "
        "template's text after the user's message, then the reply), as contrastive activation "
        "addition adds it after the instruction; all: at every position, the question's too",
    )


class Steer(Arm):
    name = "steer"
    help = (
        "the untuned model steered by a vector of its own activations on the same prompts "
        "(unbiased minus biased answer), at the layer and scale of the highest mean validation "
        "margin"
    )
    Options = SteerOptions
    steers = True

    def problems(self, recipe: Recipe) -> Iterator[Problem]:
        if recipe.eval.backend != "hf":
            yield (
                "arms",
                f"arms: the steer arm adds its vector in the hf engine; eval.backend is "
                f"{recipe.eval.backend}",
            )
        if recipe.capability.lm_eval_tasks:
            yield (
                "capability.lm_eval_tasks",
                "capability.lm_eval_tasks: lm-evaluation-harness cannot add the steer arm's "
                "vector; leave the steer arm out of a run with lm-eval tasks",
            )
