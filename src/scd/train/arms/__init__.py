"""The arena's arms and the training methods (:mod:`scd.train.arms.base`), one module each,
registered by name in :mod:`scd.config.arms`: the built-in ones by the lines below, when this
package is imported. Code above it looks them up through this package (its names are
:mod:`scd.config.arms`'s), so that they are registered when it does."""

from __future__ import annotations

from scd.config.arms import (
    ARMS,
    METHODS,
    arena_spec_class,
    arm_class,
    arm_names,
    method_class,
    padding_free_problem,
)

__all__ = [
    "ARMS",
    "METHODS",
    "arena_spec_class",
    "arm_class",
    "arm_names",
    "method_class",
    "padding_free_problem",
]


def _register_builtins() -> None:
    from scd.train.arms.dpo import DPO, DPOContrast
    from scd.train.arms.erase import Erase
    from scd.train.arms.kto import KTO, KTOContrast
    from scd.train.arms.sft import SFT, General, SFTContrast
    from scd.train.arms.steer import Steer
    from scd.train.arms.untrained import Base, Prompt

    arms = (Base, Prompt, General, Steer, Erase, SFTContrast, DPOContrast, KTOContrast)
    for arm in arms:
        ARMS.register(arm)
    for method in (SFT, DPO, KTO):
        METHODS.register(method)


_register_builtins()
