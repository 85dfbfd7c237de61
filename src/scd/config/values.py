"""A recipe value checked against its key's type (:func:`coerce`), and the keys of TRL's configs
that a recipe's ``train:`` section takes beyond scd's own (:func:`library_fields`), each checked
by TRL's own type (:func:`library_value`). The loader (:mod:`scd.config.loader`) reads every
key through these."""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, Literal

from scd.config.arms import METHODS, method_class, method_decided
from scd.config.options import TYPE_NAMES, one_of
from scd.config.training import TRL_DECIDED
from scd.errors import InputError

__all__ = ["coerce", "library_fields", "library_value"]


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against a field type; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        errors = []
        for arg in (a for a in typing.get_args(tp) if a is not type(None)):
            try:
                return coerce(value, arg, where)
            except InputError as err:
                errors.append((arg, err))
        # a list that fails inside: what is wrong in it, not that it is no number
        of_its_kind = [err for arg, err in errors if (typing.get_origin(arg) or arg) is type(value)]
        raise (of_its_kind or [err for _, err in errors])[0]
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise InputError(f"{where}: expected {one_of(typing.get_args(tp))}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise InputError(f"{where}: expected a list, got {value!r}")
        return [coerce(v, typing.get_args(tp)[0], where) for v in value]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):  # TRL's and transformers' choices
        if value not in [e.value for e in tp]:
            raise InputError(f"{where}: expected {one_of([e.value for e in tp])}, got {value!r}")
        return value
    if tp is Any:
        return value
    if tp is float and isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    wrong_kind = isinstance(value, bool) and tp in (int, float)
    if wrong_kind or (
        isinstance(tp, type)
        and not isinstance(value, tp)
        and not (tp is float and isinstance(value, int))
    ):
        raise InputError(f"{where}: expected {TYPE_NAMES.get(tp, tp.__name__)}, got {value!r}")
    return float(value) if tp is float else value


def library_fields() -> dict[str, Any]:
    """The fields of every registered method's TRL config (SFTConfig, DPOConfig, KTOConfig ...)
    and their types: the keys a recipe's ``train:`` section takes beyond scd's own (TRL is
    imported only when a ``train:`` key is not scd's own: one of these, or a typo to find the
    nearest name for)."""
    METHODS.require()
    return _library_fields(tuple(METHODS))


@functools.cache
def _library_fields(methods: tuple[str, ...]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in methods:
        cls = method_class(name)().config()
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if f.init:  # a field two configs type differently takes either type
                found[f.name] = tp if found.get(f.name, tp) == tp else found[f.name] | tp
    return found


def library_value(name: str, value: Any, key: str, problems: list[tuple[str, str]]) -> Any:
    """A ``train:`` key that is not scd's own: a TRL config field, checked by its type."""
    if name in TRL_DECIDED or name in method_decided():
        problems.append(
            (
                key,
                f"{key}: scd sets this key of TRL's config itself (from "
                "output_dir, wandb, train.device and the evaluator)",
            )
        )
        return None
    tp = library_fields()[name]
    try:
        return coerce(value, tp, key)
    except InputError as err:
        problems.append((key, str(err)))
        return None
