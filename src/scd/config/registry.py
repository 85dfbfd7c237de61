"""What scd finds by name: the engines (:data:`scd.config.engine.ENGINES`), the arena's arms and
training methods (:data:`scd.config.arms.ARMS`, :data:`~scd.config.arms.METHODS`) and the
benchmarks (:data:`scd.eval.benchmarks.REGISTRY`) are each a :class:`Registry`, and each is
filled the same way: ``REGISTRY.register(thing)``, named by the thing's ``name``.

The registries of engines, arms and methods sit here, below the modules that hold those
things, so that a recipe can be read with every key they add; the packages that hold them
register their built-in ones when imported (:mod:`scd.eval.engines`, :mod:`scd.train.arms`),
and everything that reads a recipe or runs a model imports them first. No module here names one
above it: the layer test (``tests/test_architecture.py``) sees every dependency.
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

from scd.config.options import one_of
from scd.errors import InputError

__all__ = ["Registry", "load_object"]

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    """Things by name, in the order they were registered. ``key`` names, in an error, the recipe
    key or flag whose value is looked up (``backend``, ``arms``, ``benchmark`` ...)."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def register(self, thing: T) -> T:
        """Add ``thing`` under its ``name`` (a later one of the same name replaces it); returns
        it, so that it also serves as a class decorator."""
        name = getattr(thing, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{thing!r}: a registered {self.key} needs a 'name' (a string)")
        self[name] = thing
        return thing

    def require(self) -> None:
        """Refuse to be read before anything is registered (its home package not imported:
        every key and name it adds would silently be missing)."""
        if not self:
            raise RuntimeError(
                f"no {self.key} is registered: the package that holds them registers the "
                "built-in ones when imported, and nothing has imported it yet"
            )

    def named(self, name: str) -> T:
        """The thing registered as ``name``.

        Raises:
            InputError: no such thing (naming the known ones).
        """
        if name in self:
            return self[name]
        self.require()
        raise InputError(f"expected {one_of(list(self))}", key=self.key, value=name)


def load_object(path: str) -> Any:
    """The object at ``"module:name"`` (its module imported now): how scd refers to a class of
    a library it imports only when it is used (TRL's trainers and configs)."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)
