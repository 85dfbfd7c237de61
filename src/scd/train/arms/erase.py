"""The ``erase`` arm: no training -- a linear concept eraser (LEACE) of the group a prompt names,
fitted on the base model's activations over the setting's training prompts and their
descriptor-free baselines, at the layers that keep validation bias lowest within a KL bound
(:mod:`scd.eval.erasure`, :mod:`scd.eval.erasure_search`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from scd.config.options import Options, non_negative, option
from scd.train.arms.base import Arm, Problem
from scd.train.arms.steer import check_layers

if TYPE_CHECKING:
    from scd.config.schema import Recipe

__all__ = ["Erase", "EraseOptions"]


@dataclass
class EraseOptions(Options):
    erase_layers: list[int | list[int]] | None = option(
        None,
        "erase arm: the decoder layers to try, each a layer (the residual stream entering it; "
        "0: the token embeddings) or a list of layers erased together (default: 0 and four "
        "layers spread over the middle half)",
        check=check_layers,
    )
    erase_concept: Literal["axis", "bucket", "descriptor"] = option(
        "axis",
        "erase arm: the group a prompt names, as the eraser's classes (with the "
        "descriptor-free baseline's): its HolisticBias axis, bucket or descriptor",
    )
    erase_max_kl: float | None = option(
        0.5,
        "erase arm: the largest KL from the base model on neutral prompts (nats/token) a kept "
        "layer may have (none: no bound)",
        check=non_negative,
    )


class Erase(Arm):
    name = "erase"
    help = (
        "the untuned model with the group a prompt names erased from its activations (LEACE, "
        "fitted on the same prompts), at the layers chosen on validation prompts"
    )
    Options = EraseOptions
    erases = True

    def problems(self, recipe: Recipe) -> Iterator[Problem]:
        if recipe.eval.backend != "hf":
            yield (
                "arms",
                f"arms: the erase arm erases in the hf engine; eval.backend is "
                f"{recipe.eval.backend}",
            )
        if recipe.capability.lm_eval_tasks:
            yield (
                "capability.lm_eval_tasks",
                "capability.lm_eval_tasks: lm-evaluation-harness cannot apply the erase arm's "
                "eraser; leave the erase arm out of a run with lm-eval tasks",
            )
