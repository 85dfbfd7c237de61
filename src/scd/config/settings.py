"""The 8 transfer settings of the SCD paper (Table 9): the settings file, read and checked.

A setting says how a prompt table is split into a train and an eval part (split by prompt set,
so a train and an eval part never share a set -- nor a prompt text): ``random`` (a seeded
held-out fraction of the sets), ``source`` (train on one prompt set, evaluate on a second), or
``filter`` (train and eval filters over principle, scenario, scale and axis that exclude each
other); :func:`split_masks` splits a prompt table by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from scd.config.schema import SEED
from scd.config.vocabulary import PRINCIPLES, SCALES, SCENARIOS
from scd.errors import InputError
from scd.io import read_yaml

if TYPE_CHECKING:  # numpy and pyarrow are imported where a table is split, not by every command
    import numpy as np
    import pyarrow as pa

__all__ = ["FILTER_KEYS", "Setting", "load_settings", "settings_path", "split_masks"]

FILTER_KEYS = ("principle", "scenario", "scale", "axis")
_KNOWN = {"principle": PRINCIPLES, "scenario": SCENARIOS, "scale": SCALES}
HOLISTIC_BIAS_AXES = (  # a setting may name one that a smaller descriptor list lacks
    "ability",
    "age",
    "body_type",
    "characteristics",
    "cultural",
    "gender_and_sex",
    "nationality",
    "nonce",
    "political_ideologies",
    "race_ethnicity",
    "religion",
    "sexual_orientation",
    "socioeconomic_class",
)


def settings_path() -> Path:
    """The packaged settings file (Table 9)."""
    return Path(str(files("scd.config") / "data" / "settings.yaml"))


@dataclass(frozen=True)
class Setting:
    """One transfer setting: how its train and eval prompt sets are chosen."""

    number: int
    description: str
    split: str  # "random" | "source" | "filter"
    eval_fraction: float = 0.2
    train: dict[str, tuple[str, ...]] = field(default_factory=dict)
    eval: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _filter(path: Path, where: str, spec: object) -> dict[str, tuple[str, ...]]:
    if not isinstance(spec, dict) or not spec:
        raise InputError(f"{path}: {where} must map {'/'.join(FILTER_KEYS)} to lists of names")
    out = {}
    for key, values in spec.items():
        if key not in FILTER_KEYS:
            raise InputError(f"{path}: {where}.{key}: unknown key, expected one of {FILTER_KEYS}")
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list) or not values:
            raise InputError(f"{path}: {where}.{key} must be a non-empty list of names")
        for value in values:
            if key in _KNOWN and value not in _KNOWN[key]:
                raise InputError(
                    f"{path}: {where}.{key}: unknown {key} '{value}', expected one of "
                    f"{', '.join(_KNOWN[key])}"
                )
        out[key] = tuple(str(v) for v in values)
    return out


def load_settings(path: Path | str | None = None) -> dict[int, Setting]:
    """Load and validate the settings file (defaults to the packaged Table 9 settings).

    Raises:
        InputError: an unreadable file or YAML, unknown keys, unknown principle/scenario/scale
            names, train and eval filters that could select the same prompt sets, or a bad eval
            fraction.
    """
    path = Path(path) if path else settings_path()
    data = read_yaml(path)
    if not isinstance(data, dict) or not data:
        raise InputError(f"{path}: expected a mapping setting number -> definition")
    settings = {}
    for number, spec in data.items():
        where = f"setting {number}"
        if not isinstance(number, int) or not isinstance(spec, dict):
            raise InputError(f"{path}: {where}: expected an integer key mapping to a definition")
        unknown = set(spec) - {"description", "split", "eval_fraction", "train", "eval"}
        if unknown:
            raise InputError(f"{path}: {where}: unknown keys {sorted(unknown)}")
        split = spec.get("split", "filter")
        if split not in ("random", "source", "filter"):
            raise InputError(f"{path}: {where}.split '{split}': expected random, source or filter")
        fraction = spec.get("eval_fraction", 0.2)
        if not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            raise InputError(f"{path}: {where}.eval_fraction must be a number between 0 and 1")
        train = eval_ = {}
        if split == "filter":
            train = _filter(path, f"{where}.train", spec.get("train"))
            eval_ = _filter(path, f"{where}.eval", spec.get("eval"))
            shared = [k for k in train if k in eval_ and set(train[k]) & set(eval_[k])]
            if not any(k in eval_ and not set(train[k]) & set(eval_[k]) for k in train):
                raise InputError(
                    f"{path}: {where}: train and eval filters overlap"
                    f"{' on ' + ', '.join(shared) if shared else ''}; they must exclude each other"
                )
        settings[number] = Setting(
            number, str(spec.get("description", "")), split, float(fraction), train, eval_
        )
    return settings


def _match(table: pa.Table, spec: dict[str, tuple[str, ...]]) -> np.ndarray:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = np.ones(table.num_rows, dtype=bool)
    for key, values in spec.items():
        column = table[key].combine_chunks().cast(pa.string())
        mask &= pc.is_in(column, value_set=pa.array(values)).to_numpy(zero_copy_only=False)
    return mask


def split_masks(
    table: pa.Table, setting: Setting, seed: int = SEED
) -> tuple[np.ndarray, np.ndarray]:
    """Return boolean (train, eval) row masks of a prompt table for a filter or random setting.

    Raises:
        InputError: a filter names an axis the prompts don't have, or a side selects nothing.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if setting.split == "source":
        raise InputError(f"setting {setting.number} splits by prompt source, not within one table")
    if setting.split == "random":
        set_ids = table["set_id"].combine_chunks()
        unique = np.sort(np.asarray(pc.unique(set_ids).to_pylist(), dtype=object))
        rng = np.random.default_rng(seed)
        n_eval = max(1, round(setting.eval_fraction * len(unique)))
        held = pa.array(unique[rng.permutation(len(unique))[:n_eval]].tolist(), pa.string())
        eval_mask = pc.is_in(set_ids, value_set=held).to_numpy(zero_copy_only=False)
        return ~eval_mask, eval_mask
    axes = set(pc.unique(table["axis"].combine_chunks().cast(pa.string())).to_pylist())
    for side, spec in (("train", setting.train), ("eval", setting.eval)):
        for axis in spec.get("axis", ()):
            if axis not in axes and axis not in HOLISTIC_BIAS_AXES:
                raise InputError(
                    f"setting {setting.number}.{side}.axis: '{axis}' is not an axis of these "
                    f"prompts (axes: {', '.join(sorted(axes))})"
                )
    train, eval_ = _match(table, setting.train), _match(table, setting.eval)
    for side, mask in (("train", train), ("eval", eval_)):
        if not mask.any():
            raise InputError(f"setting {setting.number}: the {side} filter selects no prompts")
    return train, eval_
