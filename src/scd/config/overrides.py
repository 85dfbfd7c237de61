"""What changes a recipe's data before it is checked: keys under their old names brought up to
date (:data:`RENAMED`, :func:`rename_keys`, each with a one-line notice) and ``--set key=value``
overrides (:func:`apply_overrides`), on nested mappings addressed by dotted keys
(``train.learning_rate``: :func:`pop_key`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import yaml

from scd.errors import InputError

__all__ = ["RENAMED", "Say", "apply_overrides", "pop_key", "rename_keys"]

Say = Callable[[str], None]  # takes each notice's line (None: a FutureWarning instead)
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


def _has(tree: dict[str, Any], key: str) -> bool:
    *sections, last = key.split(".")
    for name in sections:
        tree = tree.get(name) if isinstance(tree, dict) else None
    return isinstance(tree, dict) and last in tree


def pop_key(tree: dict[str, Any], key: str) -> tuple[bool, Any]:
    """Remove ``key`` (``a.b.c``) from ``tree``: ``(True, its value)``, else ``(False, None)``."""
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


def rename_keys(data: dict[str, Any], say: Say | None, where: str) -> dict[str, Any]:
    """Old keys moved to their new names, each with a one-line notice: to ``say``, else as a
    ``FutureWarning``.

    Raises:
        InputError: a key given under its old and its new name.
    """
    for old, new in RENAMED.items():
        found, value = pop_key(data, old)
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


def apply_overrides(data: dict[str, Any], overrides: list[str], say: Say | None) -> dict[str, str]:
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
        for leaf in _leaves(rename_keys(tree, say, f"--set {item}")):
            *sections, last = leaf.split(".")
            node = data
            for name in sections:
                node = node.setdefault(name, {})
                if not isinstance(node, dict):
                    raise InputError(
                        f"'{name}' is not a section of the recipe", key="set", value=item
                    )
            node[last] = pop_key(tree, leaf)[1]
            given[leaf] = f"--set {item}"
    return given
