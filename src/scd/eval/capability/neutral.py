"""The neutral prompt set the KL divergence from the base model is measured on: instructions
naming no social group, each with a reference reply (default: the packaged ``neutral_prompts.yaml``;
see :mod:`scd.eval.capability`)."""

from __future__ import annotations

from pathlib import Path

from scd.data_gen import data_path
from scd.errors import InputError
from scd.io import read_yaml

__all__ = ["NEUTRAL_PROMPTS", "load_neutral_prompts"]

NEUTRAL_PROMPTS = "neutral_prompts.yaml"  # packaged in scd/data_gen/data
ITEM_KEYS = ("id", "topic", "instruction", "response")


def load_neutral_prompts(path: Path | str | None = None) -> tuple[str, list[dict[str, str]]]:
    """The ``source`` string and the items of a neutral prompt set.

    Args:
        path: a YAML file ``{source: str, items: [{id, topic, instruction, response}, ...]}``
            (default: the packaged :data:`NEUTRAL_PROMPTS`).

    Raises:
        InputError: naming the file and the key: it cannot be read or parsed, a key is missing
            or not a non-empty string, or an id repeats.
    """
    path = data_path(NEUTRAL_PROMPTS) if path is None else path
    data = read_yaml(path)

    def bad(key: str, detail: str) -> InputError:
        return InputError(f"{path}: {key}: {detail}")

    if not isinstance(data, dict):
        raise bad("(top level)", "expected a mapping with 'source' and 'items'")
    if not isinstance(data.get("source"), str) or not data["source"].strip():
        raise bad("source", "expected a non-empty string")
    if not isinstance(items := data.get("items"), list) or not items:
        raise bad("items", "expected a non-empty list")
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise bad(f"items[{i}]", "expected a mapping with " + ", ".join(ITEM_KEYS))
        for key in ITEM_KEYS:
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise bad(f"items[{i}].{key}", "expected a non-empty string")
        if item["id"] in seen:
            raise bad(f"items[{i}].id", f"{item['id']!r} repeats")
        seen.add(item["id"])
    return data["source"], [{k: item[k] for k in ITEM_KEYS} for item in items]
