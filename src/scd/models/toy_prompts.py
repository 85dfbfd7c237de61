"""The planted-bias toy model's prompts (:mod:`scd.models.toy`): every contact prompt over its
descriptors (default: the packaged ``toy_descriptors.json``), the axes to plant checked against
the descriptors' own, and what the toy's info records of them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scd.data_gen import data_path
from scd.data_gen.contact import generate_contact_table
from scd.data_gen.descriptors import load_holistic_bias
from scd.errors import InputError

__all__ = ["toy_prompts"]


def _check_axes(bias_axes: Sequence[str] | str, axes: list[str], file: str) -> list[str]:
    if isinstance(bias_axes, str):  # "religion,nationality" straight from a command line
        bias_axes = [a.strip() for a in bias_axes.split(",") if a.strip()]
    for axis in bias_axes:
        if axis not in axes:
            raise InputError(
                f"not an axis of {file} (axes: {', '.join(axes)})", key="bias_axes", value=axis
            )
    return list(dict.fromkeys(bias_axes))


def toy_prompts(
    bias_axes: Sequence[str] | str, descriptors_path: Path | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The contact prompt rows over the descriptors (a HolisticBias-format file; default: the
    packaged ``toy_descriptors.json``), and what the toy's info records of them: ``bias_axes``
    (the axes to plant, each once, in the order given), ``axes`` (the descriptors'),
    ``descriptors`` (their source and path), ``descriptors_sha256`` and ``n_train_examples``.

    Raises:
        InputError: a bias axis is not an axis of the descriptors, or the file is malformed.
    """
    path = data_path("toy_descriptors.json") if descriptors_path is None else Path(descriptors_path)
    name = str(descriptors_path) if descriptors_path is not None else path.name
    descriptors = load_holistic_bias(path)
    axes = sorted({d.axis for d in descriptors.descriptors})
    planted_axes = _check_axes(bias_axes, axes, name)
    rows = generate_contact_table(descriptors).to_pylist()
    return rows, {
        "bias_axes": planted_axes,
        "axes": axes,
        "descriptors": {**descriptors.source, "path": name},
        "descriptors_sha256": descriptors.source["sha256"],
        "n_train_examples": len(rows),
    }
