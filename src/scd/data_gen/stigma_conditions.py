"""The 93 stigmatized and 29 non-stigmatized conditions of Mei, Fereidooni & Caliskan (2023)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scd.data_gen import data_path
from scd.errors import InputError
from scd.io import read_yaml

__all__ = ["ConditionForm", "StigmaCondition", "load_stigma_conditions"]

_LISTS = (("stigmatized", True), ("non_stigmatized", False))
_ENTRY_KEYS = ("condition", "category", "forms")
_FORM_KEYS = ("singular", "plural")


@dataclass(frozen=True)
class ConditionForm:
    """One phrasing (sub-condition) of a condition, verb included.

    Attributes:
        singular: Text after "someone who ", e.g. "has HIV" or "is Latina".
        plural: Text after "people who ", e.g. "have HIV" or "are Latinas".
    """

    singular: str
    plural: str


@dataclass(frozen=True)
class StigmaCondition:
    """A condition of the paper with its category and its forms.

    Attributes:
        condition: The paper's name of the condition, e.g. "Latina/Latino".
        category: The paper's category, e.g. "Ethnicity".
        stigmatized: True for the 93 stigmatized conditions, False for the 29 comparison ones.
        forms: The sub-conditions, at least one.
    """

    condition: str
    category: str
    stigmatized: bool
    forms: tuple[ConditionForm, ...]


def _text(value: Any, where: str, key: str) -> str:
    """Returns ``value`` if it is a non-empty string, else raises InputError."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value.strip()


def _mapping(value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """Checks that ``value`` is a mapping with exactly ``keys``, else raises InputError."""
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a mapping with keys {', '.join(keys)}")
    missing = [k for k in keys if k not in value]
    unknown = [str(k) for k in value if k not in keys]
    if missing or unknown:
        problem = f"missing key '{missing[0]}'" if missing else f"unknown key '{unknown[0]}'"
        raise InputError(f"{where}: {problem}; expected keys {', '.join(keys)}")
    return value


def load_stigma_conditions(path: Path | None = None) -> list[StigmaCondition]:
    """Loads and validates the stigmatized and non-stigmatized conditions.

    Args:
        path: A YAML file with the lists ``stigmatized`` and ``non_stigmatized``; the packaged
            ``stigma_conditions.yaml`` when None.

    Returns:
        The stigmatized conditions, then the non-stigmatized ones, each in file order.

    Raises:
        InputError: The file cannot be read or parsed, a key is missing or unknown, a value is
            empty, a condition has no forms, or a condition name repeats within its list.
    """
    path = path or data_path("stigma_conditions.yaml")
    data = _mapping(read_yaml(path), f"{path}: top level", tuple(key for key, _ in _LISTS))
    conditions: list[StigmaCondition] = []
    for key, stigmatized in _LISTS:
        entries = data[key]
        if not isinstance(entries, list) or not entries:
            raise InputError(f"{path}: '{key}' must be a non-empty list of conditions")
        seen: set[str] = set()
        for i, raw in enumerate(entries):
            where = f"{path}: {key}[{i}]"
            entry = _mapping(raw, where, _ENTRY_KEYS)
            condition = _text(entry["condition"], where, "condition")
            where = f"{where} (condition '{condition}')"
            if condition in seen:
                raise InputError(f"{where}: duplicate condition; names must be unique in '{key}'")
            seen.add(condition)
            raw_forms = entry["forms"]
            if not isinstance(raw_forms, list) or not raw_forms:
                raise InputError(f"{where}: 'forms' must be a non-empty list of singular/plural")
            forms = []
            for j, raw_form in enumerate(raw_forms):
                at = f"{where} forms[{j}]"
                form = _mapping(raw_form, at, _FORM_KEYS)
                forms.append(ConditionForm(*(_text(form[k], at, k) for k in _FORM_KEYS)))
            category = _text(entry["category"], where, "category")
            conditions.append(StigmaCondition(condition, category, stigmatized, tuple(forms)))
    return conditions
