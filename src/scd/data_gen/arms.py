"""The training rows of the arena's arms that are made from a setting's SFT data, so that every
arm trains on the setting's train prompts and is evaluated on the same held-out part.

- :func:`write_general_rows` (the ``general`` control): as many general instruction rows as the
  setting's SFT data has train rows (:func:`~scd.data_gen.general.load_general`, gone through again
  if the source is smaller), so that training takes the same steps with the same hyperparameters.
- :func:`write_answer_rows`: rows made from each contact prompt of the SFT rows with its unbiased
  and its biased answer (the answer alone, whatever ``data.style``) -- a method's own shape
  (DPO's pairs, KTO's labelled rows: :mod:`scd.train.arms`). General instructions mixed into the
  SFT rows (``data.general_fraction``) have no biased answer and are left out. Relevance twins
  (:mod:`scd.data_gen.contrast`) join the training part in the same shape, their warranted answer
  as the unbiased one.
- :func:`write_sft_rows`: the SFT rows as they are, with twins joining the training part (a
  contrast arm of SFT).

Each writes ``OUT/train.parquet``, ``OUT/eval.parquet`` and ``OUT/manifest.json`` atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from scd import __version__
from scd.data_gen.contact import read_prompts
from scd.data_gen.contrast import Twin
from scd.data_gen.general import load_general
from scd.errors import InputError
from scd.io import atomic_output_dir, read_json, write_json

__all__ = ["CONVERSATION", "reply", "write_answer_rows", "write_general_rows", "write_sft_rows"]

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
CONVERSATION = pa.list_(_MESSAGE)  # a column of chat messages (role, content)
MakeRows = Callable[[dict[str, Any], str, str], list[dict[str, Any]]]  # (row, good, bad) -> rows


def write_general_rows(sft: Path | str, out: Path | str, general: str, seed: int) -> dict:
    """The general arm's rows: general instructions only, as many as ``sft``'s train rows."""
    sft = Path(sft)
    n = pq.read_metadata(sft / "train.parquet").num_rows
    rows = load_general(general, n, seed, repeat=True)
    info = {
        "kind": "arm_data",
        "arm": "general",
        "scd_version": __version__,
        "source": general,
        "seed": seed,
        "sft": str(sft),
        "counts": {"train": len(rows)},
        "distinct_prompts": len({r["prompt"][0]["content"] for r in rows}),
    }
    with atomic_output_dir(out, "arm_data") as tmp:
        schema = pq.read_schema(sft / "train.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp / "train.parquet")
        pq.write_table(pq.read_table(sft / "eval.parquet"), tmp / "eval.parquet")
        write_json(tmp / "manifest.json", info)
    return info


def reply(text: str) -> list[dict[str, str]]:
    """An assistant turn holding ``text``."""
    return [{"role": "assistant", "content": text}]


def _answers(prompts: list[Path]) -> dict[str, tuple[str, str]]:
    """``prompt_id -> (unbiased, biased)`` over the prompt sets a setting drew from."""
    found = {}
    for path in prompts:
        cols = read_prompts(path).select(["prompt_id", "unbiased_answer", "biased_answer"])
        for r in cols.to_pylist():
            found[r["prompt_id"]] = (r["unbiased_answer"], r["biased_answer"])
    return found


def write_answer_rows(
    sft: Path | str,
    prompts: list[Path | str],
    out: Path | str,
    arm: str,
    make: MakeRows,
    schema: pa.Schema,
    shuffle_seed: int | None = None,
    twins: Sequence[Twin] = (),
) -> dict[str, Any]:
    """Arm ``arm``'s rows from the contact prompts of ``sft``'s train and eval rows:
    ``make(row, unbiased answer, biased answer)`` gives each prompt's rows (``prompts``: the
    prompt sets they were drawn from, for the answers), written with ``schema``; then
    ``make(twin, warranted, other)`` for each of ``twins`` in the training part; shuffled with
    ``shuffle_seed`` when given (KTO: TRL reads rows in order and pairs each with the next one's
    completion for its KL term).

    Raises:
        InputError: SFT rows whose prompts are not in ``prompts``.
    """
    sft = Path(sft)
    answers = _answers([Path(p) for p in prompts])
    parts = {}
    for part in ("train", "eval"):
        rows = pq.read_table(sft / f"{part}.parquet").to_pylist()
        lost = [
            r["prompt_id"] for r in rows if r["source"] == "scd" and r["prompt_id"] not in answers
        ]
        if lost:
            raise InputError(
                f"{sft}/{part}.parquet: {len(lost)} rows whose prompts are not in "
                f"{', '.join(map(str, prompts))} (e.g. {lost[0]})"
            )
        made = [x for r in rows if r["source"] == "scd" for x in make(r, *answers[r["prompt_id"]])]
        if part == "train":
            made += [x for twin in twins for x in make(*twin)]
        if shuffle_seed is not None:
            order = np.random.default_rng(shuffle_seed).permutation(len(made))
            made = [made[i] for i in order]
        parts[part] = made
    info = {
        "kind": "arm_data",
        "arm": arm,
        "scd_version": __version__,
        "sft": str(sft),
        "sft_manifest": read_json(sft / "manifest.json").get("counts"),
        "counts": {k: len(v) for k, v in parts.items()},
        **_twin_info(twins),
    }
    with atomic_output_dir(out, "arm_data") as tmp:
        for part, rows in parts.items():
            pq.write_table(
                pa.Table.from_pylist(rows, schema=schema),
                tmp / f"{part}.parquet",
                compression="zstd",
            )
        write_json(tmp / "manifest.json", info)
    return info


def _twin_info(twins: Sequence[Twin]) -> dict[str, Any]:
    """What a manifest says of the twins among its training rows (nothing without twins)."""
    if not twins:
        return {}
    ids = [row["prompt_id"] for row, _, _ in twins]
    return {"twins": {"rows": len(twins), "distinct": len(set(ids))}}


def write_sft_rows(
    sft: Path | str, out: Path | str, arm: str, twins: Sequence[Twin], seed: int
) -> dict[str, Any]:
    """Arm ``arm``'s SFT rows: ``sft``'s train and eval rows as they are, ``twins`` joining the
    training part, which is shuffled (``seed``)."""
    sft = Path(sft)
    train = pq.read_table(sft / "train.parquet")
    rows = train.to_pylist() + [row for row, _, _ in twins]
    order = np.random.default_rng(seed).permutation(len(rows))
    info = {
        "kind": "arm_data",
        "arm": arm,
        "scd_version": __version__,
        "sft": str(sft),
        "sft_manifest": read_json(sft / "manifest.json").get("counts"),
        "counts": {"train": len(rows), "eval": pq.read_metadata(sft / "eval.parquet").num_rows},
        **_twin_info(twins),
    }
    with atomic_output_dir(out, "arm_data") as tmp:
        table = pa.Table.from_pylist([rows[i] for i in order], schema=train.schema)
        pq.write_table(table, tmp / "train.parquet", compression="zstd")
        pq.write_table(pq.read_table(sft / "eval.parquet"), tmp / "eval.parquet")
        write_json(tmp / "manifest.json", info)
    return info
