"""Options defined once: each is a dataclass field with its type (``Literal`` for a closed set),
default, help and check. Command-line flags (:func:`add_options`) and recipe keys
(:mod:`scd.config.loader`) are generated from the same fields, and :func:`field_problems` checks
a value the same way for both.

A field's metadata (set by :func:`option`) says what else it is: ``speed`` -- it changes only
speed or memory, so it is recorded but not pinned (a killed run may resume with another value);
``pin`` -- how it enters the identity of a result (:meth:`Options.identity`); ``flag=False`` --
a recipe key only; ``key=False`` -- a flag only (an input that ``scd run`` provides itself).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import field
from typing import Any, Literal, TypeVar

__all__ = [
    "TYPE_NAMES",
    "Options",
    "above_zero",
    "add_options",
    "argument_type",
    "device_name",
    "field_problems",
    "flag_values",
    "fraction",
    "http_url",
    "literal_values",
    "masked",
    "non_negative",
    "one_of",
    "option",
    "Pin",
    "positive",
    "share",
    "speed_keys",
]

Check = Callable[[Any], "str | None"]  # a value -> what is wrong with it, or None


class Pin(enum.Enum):
    """How an option enters the identity of a result (:meth:`Options.identity`)."""

    ALWAYS = "always"  # at its effective value
    CHANGED = "changed"  # only where it, or another of its group, differs from the default
    SUMMARY = "summary"  # in the cache key, not in run.json: it changes the summary only
    NEVER = "never"  # an input path (its file is hashed instead), what to run, speed


def one_of(values: Sequence[Any]) -> str:
    """``a, b or c``: the allowed values, for an error message."""
    values = [str(v) for v in values]
    return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]


def positive(value: Any) -> str | None:
    return None if value >= 1 else "expected a positive number"


def above_zero(value: Any) -> str | None:
    return None if value > 0 else "expected a number > 0"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else "expected >= 0"


def fraction(value: Any) -> str | None:
    return None if 0 <= value < 1 else "expected 0 <= f < 1"


def share(value: Any) -> str | None:
    return None if 0 < value <= 1 else "expected 0 < f <= 1"


def device_name(value: Any) -> str | None:
    ok = re.fullmatch(r"cpu|mps|cuda(:\d+)?", value)
    return None if ok else "expected cpu, cuda, cuda:N or mps"


def masked(value: Any) -> Any:
    """``value`` as an error may show it: a URL's credentials (``//user:pw@``) and query
    hidden."""
    if not isinstance(value, str) or "://" not in value:
        return value
    value = re.sub(r"\?\S*", "?<hidden>", value)  # a query may carry a key too
    return re.sub(r"//[^/@\s]*@", "//<credentials>@", value)


def http_url(value: Any) -> str | None:
    """An http(s) URL with a host and without credentials (a key goes in an environment
    variable, never in a URL that is recorded)."""
    from urllib.parse import urlsplit

    url = urlsplit(value)
    try:
        url.port  # noqa: B018  # a port that is not a number fails here
    except ValueError:
        return "expected an http:// or https:// URL with a valid port"
    if url.scheme not in ("http", "https") or not url.hostname:
        return "expected an http:// or https:// URL"
    if url.query or url.fragment:
        return "expected the API's base URL, no ?query or #fragment (a key: --api-key-env)"
    if "@" in url.netloc:
        return "put no credentials in the URL (the API key goes in --api-key-env)"
    return None


def option(
    default: Any = None,
    help: str = "",
    *,
    check: Check | None = None,
    speed: bool = False,
    flag: bool = True,
    key: bool = True,
    required: bool = False,
    factory: Callable[[], Any] | None = None,
    spread: bool = False,
    pin: Pin = Pin.ALWAYS,
    digest: Callable[[Any], Any] | None = None,
    group: str | None = None,
    kinds: tuple[str, ...] | None = None,
) -> Any:
    """A dataclass field that is an option (see the module docstring); ``required``: the flag
    must be given (``scd run`` fills the value itself); ``factory`` for a mutable default;
    ``spread``: a mapping whose keys are the section's own (a recipe's extra keys, checked by
    the loader against a library's config: ``TrainSpec.trl``).

    ``pin`` and ``digest`` say how the option enters the identity of a result
    (:meth:`Options.identity`): ``Pin.ALWAYS``; ``Pin.CHANGED`` -- only where its value
    differs from the default's (an option added later keeps every earlier result's identity;
    those of one ``group`` enter together, where any of them differs; such a default must never
    change: earlier results without the key ran with it); ``Pin.SUMMARY`` -- it changes the
    summary, not the records (a finished evaluation is summarized again with another value; a
    cached result is another one); ``Pin.NEVER`` (an input path, whose content the benchmark
    hashes instead, or what to run rather than how; every ``speed`` option);
    ``digest``: what stands for the value in the identity (a hash of a long list).

    ``kinds``: an engine option that only means something for these model kinds (``causal``,
    ``masked``, ``classifier``): a command that runs none of them has no flag for it."""
    if not isinstance(pin, Pin):  # True, False, "changed", "summary" of earlier scd
        raise TypeError(f"option(pin=...): a scd.config.options.Pin, got {pin!r}")
    meta = {
        "help": help,
        "check": check,
        "speed": speed,
        "pin": Pin.NEVER if speed else pin,
        "digest": digest,
        "group": group,
        "flag": flag,
        "key": key,
        "required": required,
        "spread": spread,
        "kinds": kinds,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


_O = TypeVar("_O", bound="Options")


class Options:
    """A dataclass of options that checks its own values."""

    def problems(self) -> Iterator[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad value."""
        return field_problems(self)

    def run_problems(self) -> Iterator[tuple[str, str]]:
        """``(field, what is wrong)`` for each value that ``scd run`` cannot use, though a
        command alone can (a recipe's section: it also trains with it). Default: none."""
        return iter(())

    def check(self: _O) -> _O:
        """``self``, if every option is good.

        Raises:
            InputError: the first bad option, naming its key and value.
        """
        from scd.errors import InputError

        for key, problem in self.problems():
            raise InputError(problem, key=key, value=masked(getattr(self, key, None)))
        return self

    def _fields(self) -> tuple[dataclasses.Field, ...]:
        """The fields that are these options (a subclass may hold more)."""
        return dataclasses.fields(self)

    def effective(self: _O) -> _O:
        """The values a result depends on: a default that follows another option resolved, an
        option that does not apply None (default: the options as they are). It must work on the
        defaults alone (inputs None), which :meth:`identity` compares with."""
        return self

    def identity(self, *, summary: bool = False, every: bool = False) -> dict[str, Any]:
        """What a result depends on among these options, from each field's metadata (see
        :func:`option`): the :meth:`effective` value of every field that is pinned, its digest
        where it has one; a ``Pin.CHANGED`` field only where its value differs from the
        default's, or another of its ``group`` does (``every``: always), a ``Pin.SUMMARY``
        one only with ``summary``."""
        values, default = self.effective(), _default_values(type(self))
        fields = self._fields()
        changed = {  # the groups (a field alone: its name) of which a value is not the default's
            _group(f) for f in fields if getattr(values, f.name) != getattr(default, f.name)
        }
        out = {}
        for f in fields:
            pin, value = f.metadata.get("pin", Pin.ALWAYS), getattr(values, f.name)
            if pin is Pin.NEVER or (pin is Pin.SUMMARY and not summary):
                continue
            if pin is Pin.CHANGED and not every and _group(f) not in changed:
                continue
            digest = f.metadata.get("digest")
            out[f.name] = digest(value) if digest and value is not None else value
        return out


@functools.cache
def _default_values(cls: type[Options]) -> Options:
    return cls().effective()


def _group(f: dataclasses.Field) -> str:
    return f.metadata.get("group") or f.name


def literal_values(tp: Any) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal`` type (or ``Literal | None``), else None."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if typing.get_origin(arg) is Literal:
                return typing.get_args(arg)
    return None


def field_problems(obj: Any) -> Iterator[tuple[str, str]]:
    """``(field, what is wrong)`` for each field of the dataclass ``obj`` whose value is not one
    of its ``Literal`` values or fails its ``check``; None passes an optional type and a check."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        check, value, tp = f.metadata.get("check"), getattr(obj, f.name), hints[f.name]
        optional_none = value is None and type(None) in typing.get_args(tp)
        if (allowed := literal_values(tp)) and value not in allowed and not optional_none:
            yield f.name, f"expected {one_of(allowed)}, got {masked(value)}"
        elif check and value is not None and (problem := check(value)):
            yield f.name, f"{problem}, got {masked(value)}"


def speed_keys(cls: type, prefix: str = "") -> list[str]:
    """The dotted keys of ``cls``'s fields (sections included, recursively) that change only
    speed or memory: recorded, not pinned."""
    hints, keys = typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        if f.metadata.get("speed"):
            keys.append(prefix + f.name)
        elif dataclasses.is_dataclass(hints[f.name]):
            keys += speed_keys(hints[f.name], f"{prefix}{f.name}.")
    return keys


TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def argument_type(base: type, check: Check | None) -> Callable[[str], Any]:
    """An argparse ``type``: ``base`` parsed, then ``check``ed, each failure one line."""

    def parse(text: str) -> Any:
        try:
            value = base(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {TYPE_NAMES[base]}, got {text!r}") from None
        problem = check(value) if check else None
        if problem:
            raise argparse.ArgumentTypeError(f"{problem}, got {masked(value)!r}")
        return value

    parse.__name__ = TYPE_NAMES[base]  # argparse names the type in its own errors
    return parse


def _flag_fields(cls: type, names: Sequence[str] | None) -> Iterator[dataclasses.Field]:
    for f in dataclasses.fields(cls):
        if f.metadata.get("flag", True) and (names is None or f.name in names):
            yield f


def add_options(
    parser: argparse.ArgumentParser, cls: type, names: Sequence[str] | None = None
) -> None:
    """Add ``--flag`` for each field of ``cls`` that is a flag (or those in ``names``): type,
    choices, default, help and check from the field. A list becomes ``nargs="+"``, a bool
    ``store_true`` (``--FLAG/--no-FLAG`` when it is on by default, or None: decided later)."""
    hints = typing.get_type_hints(cls)
    for f in _flag_fields(cls, names):
        meta, tp = f.metadata, hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kwargs: dict[str, Any] = {
            "default": default,
            "help": meta.get("help", "").replace("%", "%%"),
            "required": meta.get("required", False),
        }
        args = typing.get_args(tp)
        choices = literal_values(tp)
        if tp is bool or (set(args) == {bool, type(None)} and default is None):
            # on by default, or decided later: --no-FLAG turns it off
            on = default or default is None
            kwargs["action"] = argparse.BooleanOptionalAction if on else "store_true"
        elif choices:
            kwargs["choices"] = choices
        else:
            if list in (typing.get_origin(tp), *map(typing.get_origin, args)):
                kwargs["nargs"] = "+"
            base = next((t for t in (int, float, str) if t in (tp, *args)), str)
            kwargs["type"] = argument_type(base, meta.get("check"))
        parser.add_argument("--" + f.name.replace("_", "-"), **kwargs)


def flag_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The values of the flags :func:`add_options` generated from ``cls``."""
    return {f.name: getattr(args, f.name) for f in _flag_fields(cls, None)}
