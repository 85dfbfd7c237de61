"""Reading a recipe: YAML (``yaml.safe_load``) -> renamed keys brought up to date ->
``--set key=value`` overrides -> the schema's dataclasses (:mod:`scd.config.schema`), every
problem reported at once, one line each naming the file (or ``--set``) and the key.

The ``eval`` section takes one sub-section per benchmark: the caller passes the benchmarks'
options classes (``sections``), so that this module knows no benchmark.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import json
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from scd.config.arms import METHODS, ArenaOptions, arena_spec_class, method_class, method_decided
from scd.config.checks import recipe_problems
from scd.config.engine import DEFAULT_BACKEND, ENGINES, engine_of
from scd.config.options import TYPE_NAMES, one_of, speed_keys
from scd.config.schema import TRL_DECIDED, EvalSpec, Recipe, eval_spec_class
from scd.errors import InputError

__all__ = ["RENAMED", "fixed_part", "library_fields", "parse_recipe_dict", "parse_recipe_file"]

Say = Callable[[str], None]
RENAMED = {  # old key -> the keys that replaced it (SFTConfig's own names; sections per benchmark)
    "train.epochs": ("train.num_train_epochs",),
    "train.batch_size": ("train.per_device_train_batch_size",),
    "train.grad_accum": ("train.gradient_accumulation_steps",),
    "train.lr_scheduler": ("train.lr_scheduler_type",),
    "train.warmup_ratio": ("train.warmup_steps",),
    "eval.seed": ("eval.bias.seed", "eval.bbq.seed"),
    "eval.stigma.limit_conditions": ("eval.sds.limit_conditions", "eval.aq27.limit_conditions"),
    "eval.stigma.probes": ("eval.<probe>.enabled",),  # [sds, aq27]: eval.sds.enabled: true, ...
}


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against a field type; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        errors = []
        for arg in (a for a in typing.get_args(tp) if a is not type(None)):
            try:
                return _coerce(value, arg, where)
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
        return [_coerce(v, typing.get_args(tp)[0], where) for v in value]
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


def _extra(name: str, value: Any, key: str, problems: list[tuple[str, str]]) -> Any:
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
        return _coerce(value, tp, key)
    except InputError as err:
        problems.append((key, str(err)))
        return None


def _eval_class(data: Any, sections: Mapping[str, type]) -> type[EvalSpec]:
    """The ``eval`` section's class: the keys of the engine its ``backend`` names (an unknown
    name is reported by the section's own check, its keys read as the default engine's)."""
    backend = data.get("backend") if isinstance(data, dict) else None
    return eval_spec_class(sections, backend if backend in ENGINES else DEFAULT_BACKEND)


def _build(
    cls: type, data: Any, where: str, problems: list[tuple[str, str]], sections: Mapping[str, type]
) -> Any:
    """``cls`` from ``data``; each unknown key, wrong type or missing key is added to
    ``problems`` as ``(key, text)`` (a bad value keeps its default), so that all are reported."""
    if not isinstance(data, dict):
        problems.append((where, f"{where or 'the recipe'} must be a mapping"))
        return cls() if cls is not Recipe else None
    hints = typing.get_type_hints(cls)
    fields = {
        f.name: f
        for f in dataclasses.fields(cls)
        if f.metadata.get("key", True) and not f.metadata.get("spread")
    }
    spread = next((f.name for f in dataclasses.fields(cls) if f.metadata.get("spread")), None)
    kwargs: dict[str, Any] = {spread: {}} if spread else {}
    for name, value in data.items():
        key = f"{where}.{name}" if where else name
        tp = hints.get(name)
        if isinstance(tp, type) and issubclass(tp, EvalSpec):
            tp = _eval_class(value, sections)
        elif isinstance(tp, type) and issubclass(tp, ArenaOptions):
            tp = arena_spec_class()  # the registered arms' keys
        if name not in fields and spread and name in library_fields():
            kwargs[spread][name] = _extra(name, value, key, problems)
        elif name not in fields and issubclass(cls, EvalSpec) and (owner := engine_of(name)):
            chosen = data.get("backend", DEFAULT_BACKEND)
            if value is not None and chosen in ENGINES:  # null: unset (older recipe files)
                problems.append((key, f"{key}: an option of the {owner} backend, not of {chosen}"))
        elif name not in fields:
            known = [*fields, *(library_fields() if spread else ())]
            near = difflib.get_close_matches(str(name), known, n=1)
            hint = (
                f"did you mean '{where + '.' if where else ''}{near[0]}'?"
                if near
                else (f"expected one of {', '.join(fields)}")
            )
            problems.append((key, f"unknown key '{key}' ({hint})"))
        elif dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, value, key, problems, sections)
        else:
            try:
                kwargs[name] = _coerce(value, tp, key)
            except InputError as err:
                problems.append((key, str(err)))
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in data:
            key = f"{where}.{name}" if where else name
            problems.append((key, f"missing required key '{key}'"))
    if cls is Recipe and "eval" not in kwargs:
        kwargs["eval"] = eval_spec_class(sections)()
    try:
        return cls(**kwargs)
    except TypeError:  # a required key is missing or bad: nothing to check further
        return None


def _parse(data: Any, source: str, sections: Mapping[str, type], given: dict[str, str]) -> Recipe:
    """Build and check a recipe: every problem at once, one line each naming where it came from
    (the file, or the ``--set`` that gave the key) and the key, in the recipe's key order."""
    problems: list[tuple[str, str]] = []
    recipe = _build(Recipe, data, "", problems, sections)
    if recipe is not None:
        problems += recipe_problems(recipe)
    if problems:
        order = {f.name: i for i, f in enumerate(dataclasses.fields(Recipe))}
        lines = []
        for key, text in sorted(
            dict.fromkeys(problems), key=lambda p: order.get(p[0].split(".", 1)[0], len(order))
        ):
            origin = next((v for k, v in given.items() if key == k or key.startswith(k + ".")), "")
            lines.append(f"{origin or source}: {text}")
        raise InputError("\n".join(dict.fromkeys(lines)))
    return recipe


def _has(tree: dict[str, Any], key: str) -> bool:
    *sections, last = key.split(".")
    for name in sections:
        tree = tree.get(name) if isinstance(tree, dict) else None
    return isinstance(tree, dict) and last in tree


def _pop(tree: dict[str, Any], key: str) -> tuple[bool, Any]:
    *sections, last = key.split(".")
    for name in sections:
        tree = tree.get(name) if isinstance(tree, dict) else None
    if not isinstance(tree, dict) or last not in tree:
        return False, None
    return True, tree.pop(last)


def _put(tree: dict[str, Any], key: str, value: Any) -> None:
    """``tree[a][b][c] = value`` for ``key`` ``a.b.c``, unless it is set (or not a mapping)."""
    *sections, last = key.split(".")
    for name in sections:
        tree = tree.setdefault(name, {})
        if not isinstance(tree, dict):
            return
    tree.setdefault(last, value)


def _rename(data: dict[str, Any], say: Say | None, where: str) -> dict[str, Any]:
    """Old keys moved to their new names, each with a one-line notice: to ``say``, else as a
    ``FutureWarning``.

    Raises:
        InputError: a key given under its old and its new name.
    """
    for old, new in RENAMED.items():
        found, value = _pop(data, old)
        if not found:
            continue
        if old == "eval.stigma.probes":
            new = tuple(f"eval.{probe}.enabled" for probe in value or [])
            value = True
        given = [key for key in new if _has(data, key)]
        if given:
            raise InputError(
                f"{where}: {old} and its new name {given[0]} are both given; keep {given[0]} only"
            )
        for key in new:
            _put(data, key, value)
        text = f"{where}: {old} is now {' and '.join(new) or 'eval.<probe>.enabled'}"
        if say is None:
            warnings.warn(f"{text} (the old name still works)", FutureWarning, stacklevel=4)
        else:
            say(f"{text} (the old name still works)")
    if isinstance(data.get("eval"), dict) and data["eval"].get("stigma") == {}:
        del data["eval"]["stigma"]
    return data


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[str]:
    return [
        leaf
        for k, v in tree.items()
        for leaf in (
            _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) and v else [prefix + str(k)]
        )
    ]


def _overrides(data: dict[str, Any], overrides: list[str], say: Say | None) -> dict[str, str]:
    """Apply ``key.sub=value`` overrides (values parsed as YAML, old key names renamed); return
    ``{key: "--set item"}`` for each key they set."""
    given = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InputError(
                "expected key=value (e.g. train.learning_rate=1e-4)", key="set", value=item
            )
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        tree: dict[str, Any] = {}
        _put(tree, key, value)
        for leaf in _leaves(_rename(tree, say, f"--set {item}")):
            *sections, last = leaf.split(".")
            node = data
            for name in sections:
                node = node.setdefault(name, {})
                if not isinstance(node, dict):
                    raise InputError(
                        f"'{name}' is not a section of the recipe", key="set", value=item
                    )
            node[last] = _pop(tree, leaf)[1]
            given[leaf] = f"--set {item}"
    return given


def parse_recipe_dict(
    data: dict[str, Any],
    source: str = "recipe",
    *,
    sections: Mapping[str, type] | None = None,
    overrides: list[str] | None = None,
    say: Say | None = None,
) -> Recipe:
    """Validate a recipe given as a mapping (``source`` names it in errors); ``sections``: each
    benchmark's options class by name (the ``eval.<name>`` sections). Users call
    :func:`scd.pipeline.recipe.recipe_from_dict`, which passes every registered benchmark's."""
    data = _rename(json.loads(json.dumps(data)), say, source)
    given = _overrides(data, overrides or [], say)
    return _parse(data, source, sections or {}, given)


def parse_recipe_file(
    path: Path | str,
    overrides: list[str] | None = None,
    *,
    sections: Mapping[str, type] | None = None,
    say: Say | None = None,
) -> Recipe:
    """Read, override and validate a recipe file (see :func:`parse_recipe_dict`).

    Raises:
        InputError: unreadable YAML, unknown keys, wrong types or inconsistent settings.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        near = _near_recipe(path)
        hint = f" (did you mean {near}?)" if near else ""
        raise InputError(f"{path}: recipe not found{hint}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a directory, not a recipe file") from None
    except UnicodeDecodeError as err:
        raise InputError(
            f"{path}: not UTF-8 text (byte {err.start}); a YAML recipe is expected"
        ) from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        mark, problem = getattr(err, "problem_mark", None), getattr(err, "problem", None)
        line = f" (line {mark.line + 1}: {problem})" if mark and problem else ""
        raise InputError(f"{path}: not valid YAML{line}") from None
    data = data if isinstance(data, dict) else {}
    return parse_recipe_dict(data, str(path), sections=sections, overrides=overrides, say=say)


def _near_recipe(path: Path) -> Path | None:
    """The YAML file beside a recipe path that is not there whose name is nearest to its name
    (``recipes/quickstrat.yaml`` -> ``recipes/quickstart.yaml``); None if none is close."""
    try:
        names = [p.name for p in path.parent.iterdir() if p.suffix in (".yaml", ".yml")]
    except OSError:  # no such directory, or not one
        return None
    near = difflib.get_close_matches(path.name, names, n=1)
    return path.parent / near[0] if near else None


def fixed_part(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe (as data) without the keys that change only speed or tracking: what a run
    directory holds fixed, so that a killed run may resume with other values of those (each
    result's own identity is its benchmark's: scd.config.options.Pin)."""
    out = json.loads(json.dumps(recipe))
    engine = speed_keys(_eval_class(out.get("eval"), {}), "eval.")  # the run's engine's keys
    for key in [*speed_keys(Recipe), *engine]:
        _pop(out, key)
    return out
