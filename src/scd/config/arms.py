"""The arena's arms and the training methods, by name (:data:`ARMS`, :data:`METHODS`).

An arm is a way to get a model to compare with the base model on the same items: the base model
itself, the base model with a system prompt, or an adapter trained by a method on some rows. A
method is a trainer of TRL (SFT, DPO, KTO ...) with the rows it reads; every method is an arm of
the same name too (trained on the setting's prompts). Each is a class in a module of its own
(:class:`scd.train.arms.base.Arm`, :class:`scd.train.arms.base.Method`), registered here by one
``"module:Class"`` line and imported when used, as engines are (:mod:`scd.config.engine`); its
``Options`` (a dataclass of :func:`~scd.config.options.option` fields, or None) are keys of the
recipe's ``arena:`` section.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import typing
from collections.abc import Iterable
from typing import Any, Literal

from scd.config.options import Options, one_of, option

__all__ = [
    "ARMS",
    "ArenaOptions",
    "METHODS",
    "arena_spec_class",
    "arm_class",
    "arm_names",
    "method_class",
    "method_decided",
    "padding_free_problem",
    "register_arm",
    "register_method",
]

ARMS: dict[str, Any] = {  # an arm that is not a method -> "module:Class" (or the class)
    "base": "scd.train.arms.untrained:Base",
    "prompt": "scd.train.arms.untrained:Prompt",
    "general": "scd.train.arms.sft:General",
    "steer": "scd.train.arms.steer:Steer",
    "erase": "scd.train.arms.erase:Erase",
    "sft-contrast": "scd.train.arms.sft:SFTContrast",
    "dpo-contrast": "scd.train.arms.dpo:DPOContrast",
    "kto-contrast": "scd.train.arms.kto:KTOContrast",
}
METHODS: dict[str, Any] = {  # a training method (and the arm of its name) -> "module:Class"
    "sft": "scd.train.arms.sft:SFT",
    "dpo": "scd.train.arms.dpo:DPO",
    "kto": "scd.train.arms.kto:KTO",
}


def _seeds(value: Any) -> str | None:
    if value is not None and (not value or len(set(value)) != len(value)):
        return f"expected distinct integer seeds, each once, got {value}"
    return None


@dataclasses.dataclass
class ArenaOptions(Options):
    """The recipe's ``arena:`` section: what the arena itself takes, and every registered arm's
    own keys (:func:`arena_spec_class` adds them)."""

    seeds: list[int] | None = option(
        None,
        "train every trained arm once per seed (TRL's seed: the adapter's initial weights and "
        "the order of the rows; the data split stays data.seed's), each seed a row of "
        "arena.csv and the table showing the mean and range over seeds (none: train.seed alone)",
        check=_seeds,
    )
    cluster_unit: Literal["template", "cell"] = option(
        "template",
        "the clusters of the arena's intervals and sign-flip tests on template prompts (bias, "
        "judgment): template (principle x scenario, both actions and every scale together: "
        "one template's wording is shared by all of them) or cell (template x action x scale); "
        "the table says where the other unit's test reaches another verdict",
    )


def _changed() -> None:
    arena_spec_class.cache_clear()


def register_arm(name: str, arm: Any) -> None:
    """Add an arm that is not a method under ``name``: its class, or ``"module:Class"`` to import
    when used (a later one of the same name replaces it)."""
    ARMS[name] = arm
    _changed()


def register_method(name: str, method: Any) -> None:
    """Add a training method (and the arm of the same name) under ``name``: its class, or
    ``"module:Class"`` (a later one of the same name replaces it)."""
    METHODS[name] = method
    _changed()


def _load(table: dict[str, Any], name: str) -> Any:
    found = table[name]
    if isinstance(found, str):
        module, cls = found.split(":")
        found = table[name] = getattr(importlib.import_module(module), cls)
    return found


def method_class(name: str) -> Any:
    """The method registered as ``name`` (its module imported now).

    Raises:
        InputError: no such method (naming the known ones).
    """
    from scd.errors import InputError

    if name not in METHODS:
        raise InputError(f"expected {one_of(list(METHODS))}", key="method", value=name)
    return _load(METHODS, name)


def arm_names() -> list[str]:
    """Every arm's name: the arms that are not methods, then the methods."""
    return [*ARMS, *(m for m in METHODS if m not in ARMS)]


def arm_class(name: str) -> Any:
    """The arm registered as ``name``: an arm of :data:`ARMS`, else the method of that name.

    Raises:
        InputError: no such arm (naming the known ones).
    """
    from scd.errors import InputError

    if name in ARMS:
        return _load(ARMS, name)
    if name in METHODS:
        return _load(METHODS, name)
    raise InputError(f"expected {one_of(arm_names())}", key="arms", value=name)


@functools.cache
def arena_spec_class() -> type[Options]:
    """The recipe's ``arena:`` section: every registered arm's ``Options`` fields (arms that
    share an options class, as DPO and KTO share ``beta``, give its fields once).

    Raises:
        TypeError: two arms' options that declare the same key differently.
    """
    fields: dict[str, tuple[Any, type]] = {}
    for name in arm_names():
        options = getattr(arm_class(name), "Options", None)
        for f in dataclasses.fields(options) if options is not None else ():
            seen = fields.get(f.name)
            if seen is not None and seen[0] is not f:
                owner = seen[1].__name__
                raise TypeError(f"arena.{f.name}: declared by {owner} and by {options.__name__}")
            fields.setdefault(f.name, (f, options))
    made = []
    for key, (f, options) in fields.items():
        copy = dataclasses.field(
            default=f.default, default_factory=f.default_factory, metadata=f.metadata
        )
        made.append((key, typing.get_type_hints(options)[key], copy))
    cls = dataclasses.make_dataclass("ArenaSpec", made, bases=(ArenaOptions,))
    cls.__doc__ = (
        "How the arena's arms differ from one another (``arms:``): each arm's own keys; "
        "everything else -- data, splits, LoRA, training hyperparameters, seeds, held-out items "
        "-- is the recipe's, the same for all."
    )
    return cls


def padding_free_problem(methods: Iterable[str]) -> str | None:
    """Why ``train.padding_free: true`` cannot train with these methods (those whose TRL
    trainer has no padding-free batches, named in one line), or None."""
    lacking = [name for name in dict.fromkeys(methods) if not method_class(name).padding_free]
    if not lacking:
        return None
    having = sorted(name for name in METHODS if method_class(name).padding_free)
    return (
        f"train.padding_free: {' and '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} "
        f"no padding-free batches in TRL (only {', '.join(having)}); set it false"
    )


def method_decided() -> set[str]:
    """The keys of TRL's configs that a registered method sets itself (``beta`` ...): not
    recipe ``train:`` keys."""
    return {key for name in METHODS for key in method_class(name).decided}
