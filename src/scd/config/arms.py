"""The arena's arms and the training methods, by name (:data:`ARMS`, :data:`METHODS`).

An arm is a way to get a model to compare with the base model on the same items: the base model
itself, the base model with a system prompt, or an adapter trained by a method on some rows. A
method is a trainer of TRL (SFT, DPO, KTO ...) with the rows it reads; every method is an arm of
the same name too (trained on the setting's prompts). Each is a class with a ``name`` in a
module of its own (:class:`scd.train.arms.base.Arm`, :class:`scd.train.arms.base.Method`),
registered as engines are (:mod:`scd.config.engine`): ``ARMS.register(cls)`` or
``METHODS.register(cls)`` (:mod:`scd.train.arms` registers the built-in ones when imported); its
``Options`` (a dataclass of :func:`~scd.config.options.option` fields, or None) are keys of the
recipe's ``arena:`` section.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable
from typing import Any, Literal

from scd.config.options import Options, one_of, option
from scd.config.registry import Registry

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
]

# both filled by scd.train.arms (the built-in ones) and by whoever adds one
ARMS: Registry[Any] = Registry("arms")  # the arms that are not methods
METHODS: Registry[Any] = Registry("method")  # the training methods (each an arm too)


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


def method_class(name: str) -> Any:
    """The method registered as ``name``.

    Raises:
        InputError: no such method (naming the known ones).
    """
    return METHODS.named(name)


def arm_names() -> list[str]:
    """Every arm's name: the arms that are not methods, then the methods."""
    ARMS.require()
    return [*ARMS, *(m for m in METHODS if m not in ARMS)]


def arm_class(name: str) -> Any:
    """The arm registered as ``name``: an arm of :data:`ARMS`, else the method of that name.

    Raises:
        InputError: no such arm (naming the known ones).
    """
    from scd.errors import InputError

    if name in ARMS:
        return ARMS[name]
    if name in METHODS:
        return METHODS[name]
    raise InputError(f"expected {one_of(arm_names())}", key="arms", value=name)


def arena_spec_class() -> type[Options]:
    """The recipe's ``arena:`` section: every registered arm's ``Options`` fields (arms that
    share an options class, as DPO and KTO share ``beta``, give its fields once).

    Raises:
        TypeError: two arms' options that declare the same key differently.
    """
    return _arena_spec_class(tuple(getattr(arm_class(n), "Options", None) for n in arm_names()))


@functools.cache
def _arena_spec_class(arm_options: tuple[type | None, ...]) -> type[Options]:
    fields: dict[str, tuple[Any, type]] = {}
    for options in arm_options:
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
    METHODS.require()
    return {key for name in METHODS for key in method_class(name).decided}
