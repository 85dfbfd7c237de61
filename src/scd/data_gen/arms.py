"""The training rows of the arena's arms, made from a setting's SFT data so that every arm
trains on the setting's train prompts and is evaluated on the same held-out part.

- ``general`` (the control): as many general instruction rows as the setting's SFT data has
  train rows (:func:`~scd.data_gen.sft.load_general`, gone through again if the source is
  smaller), so that training takes the same steps with the same hyperparameters.
- ``dpo``: one preference pair per contact prompt of the SFT train rows: ``chosen`` = the
  unbiased option, ``rejected`` = the biased one (the answer alone, whatever ``data.style``);
  as many rows, so as many steps, as SFT unless the SFT rows mix in general instructions
  (``data.general_fraction``), which have no biased answer and are left out.
- ``kto``: the same prompts unpaired, each twice: the unbiased option desirable
  (``label`` true), the biased one not -- twice SFT's rows, so twice its steps at the same
  batch size and epochs.

Each writes ``OUT/train.parquet``, ``OUT/eval.parquet`` and ``OUT/manifest.json`` atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from scd import __version__
from scd.config.schema import TRAIN_METHODS
from scd.data_gen.contact import read_prompts
from scd.data_gen.sft import load_general
from scd.errors import InputError
from scd.io import atomic_output_dir, read_json, write_json

__all__ = ["PREFERENCE_METHODS", "write_general_rows", "write_preference_rows"]

PREFERENCE_METHODS = tuple(m for m in TRAIN_METHODS if m != "sft")
_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
_CONVERSATION = pa.list_(_MESSAGE)


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


def _answers(prompts: list[Path]) -> dict[str, tuple[str, str]]:
    """``prompt_id -> (unbiased, biased)`` over the prompt sets a setting drew from."""
    found = {}
    for path in prompts:
        cols = read_prompts(path).select(["prompt_id", "unbiased_answer", "biased_answer"])
        for r in cols.to_pylist():
            found[r["prompt_id"]] = (r["unbiased_answer"], r["biased_answer"])
    return found


def _preference(rows: list[dict], answers: dict[str, tuple[str, str]], method: str) -> list[dict]:
    out = []
    for r in rows:
        if r["source"] != "scd":  # general rows have no biased answer
            continue
        good, bad = answers[r["prompt_id"]]
        reply = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
        if method == "dpo":
            out.append(
                {
                    "prompt": r["prompt"],
                    "chosen": reply(good),
                    "rejected": reply(bad),
                    "prompt_id": r["prompt_id"],
                    "answer": good,
                    "rejected_answer": bad,
                }
            )
        else:
            for text, label in ((good, True), (bad, False)):
                out.append(
                    {
                        "prompt": r["prompt"],
                        "completion": reply(text),
                        "label": label,
                        "prompt_id": r["prompt_id"],
                        "answer": text,
                    }
                )
    return out


def _schema(method: str) -> pa.Schema:
    ids = [("prompt_id", pa.string()), ("answer", pa.string())]
    if method == "dpo":
        return pa.schema(
            [
                ("prompt", _CONVERSATION),
                ("chosen", _CONVERSATION),
                ("rejected", _CONVERSATION),
                *ids,
                ("rejected_answer", pa.string()),
            ]
        )
    return pa.schema(
        [("prompt", _CONVERSATION), ("completion", _CONVERSATION), ("label", pa.bool_()), *ids]
    )


def write_preference_rows(
    sft: Path | str, prompts: list[Path | str], out: Path | str, method: str, seed: int = 42
) -> dict[str, Any]:
    """The ``dpo`` or ``kto`` arm's rows from the contact prompts of ``sft``'s train and eval
    rows (``prompts``: the prompt sets they were drawn from, for the biased answers). KTO's
    rows are shuffled (``seed``): TRL reads them in order and pairs each with the next one's
    completion for its KL term.

    Raises:
        InputError: an unknown method, or SFT rows whose prompts are not in ``prompts``.
    """
    if method not in PREFERENCE_METHODS:
        raise InputError(
            f"expected one of {', '.join(PREFERENCE_METHODS)}", key="method", value=method
        )
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
        parts[part] = _preference(rows, answers, method)
        if method == "kto":
            order = np.random.default_rng(seed).permutation(len(parts[part]))
            parts[part] = [parts[part][i] for i in order]
    info = {
        "kind": "arm_data",
        "arm": method,
        "scd_version": __version__,
        "sft": str(sft),
        "sft_manifest": read_json(sft / "manifest.json").get("counts"),
        "counts": {k: len(v) for k, v in parts.items()},
    }
    with atomic_output_dir(out, "arm_data") as tmp:
        for part, rows in parts.items():
            pq.write_table(
                pa.Table.from_pylist(rows, schema=_schema(method)),
                tmp / f"{part}.parquet",
                compression="zstd",
            )
        write_json(tmp / "manifest.json", info)
    return info
