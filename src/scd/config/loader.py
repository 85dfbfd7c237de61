"""Reading a recipe: YAML (``yaml.safe_load``) -> renamed keys brought up to date and
``--set key=value`` overrides (:mod:`scd.config.overrides`) -> the schema's dataclasses
(:mod:`scd.config.schema`), each value checked by its type (:mod:`scd.config.values`), every
problem reported at once, one line each naming the file (or ``--set``) and the key; and what of a
recipe a run directory holds fixed (:func:`fixed_part`).

The ``eval`` section takes one sub-section per benchmark: the caller passes the benchmarks'
options classes (``sections``), so that this module knows no benchmark.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from scd.config.arms import ArenaOptions, arena_spec_class
from scd.config.checks import recipe_problems
from scd.config.engine import DEFAULT_BACKEND, ENGINES, engine_of
from scd.config.options import speed_keys
from scd.config.overrides import Say, apply_overrides, pop_key, rename_keys
from scd.config.schema import EvalSpec, Recipe, eval_spec_class
from scd.config.values import coerce, library_fields, library_value
from scd.errors import InputError

__all__ = ["fixed_part", "parse_recipe_dict", "parse_recipe_file"]


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
            kwargs[spread][name] = library_value(name, value, key, problems)
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
                kwargs[name] = coerce(value, tp, key)
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
    data = rename_keys(json.loads(json.dumps(data)), say, source)
    given = apply_overrides(data, overrides or [], say)
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
        pop_key(out, key)
    return out
