"""General instruction data: what the general-data control trains on and what ``data.general``
mixes into SCD's rows (a local file, a Hub dataset, or scd's own instructions), as the
conversational rows every SFT dataset of scd holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from scd.data_gen import data_path
from scd.errors import InputError
from scd.hub import require_hub_dataset
from scd.io import looks_local, read_yaml

__all__ = ["GENERAL_SET", "conversation_row", "load_general"]


def conversation_row(
    user: str, reply: str, prompt_id: str, source: str, answer: str | None
) -> dict:
    """One SFT example in TRL's prompt-completion conversational form, with its provenance."""
    return {
        "prompt": [{"role": "user", "content": user}],
        "completion": [{"role": "assistant", "content": reply}],
        "prompt_id": prompt_id,
        "source": source,
        "answer": answer,
    }


GENERAL_SET = "scd:general"  # data.general naming scd's own general instructions (package data)


def _general_table(spec: str) -> Any:
    """The rows of a general-data source as a ``datasets.Dataset``."""
    import datasets

    if spec.startswith("scd:") and spec != GENERAL_SET:
        raise InputError(f"not one of scd's own sets ({GENERAL_SET})", key="general", value=spec)
    if spec == GENERAL_SET:
        items = read_yaml(data_path("general_instructions.yaml"))["items"]
        return datasets.Dataset.from_list(
            [{"instruction": i["instruction"], "output": i["response"]} for i in items]
        )
    path = Path(spec).expanduser()
    if not path.exists() and looks_local(spec):  # never sent to the Hub as a dataset id
        raise InputError("no such file", key="general", value=spec)
    if path.is_file() and path.stat().st_size == 0:
        raise InputError(
            "an empty file (rows of instruction/output or prompt/response)",
            key="general",
            value=spec,
        )
    try:
        if path.exists():
            kind = "parquet" if path.suffix == ".parquet" else "json"
            shown = datasets.is_progress_bar_enabled()
            datasets.disable_progress_bars()  # a one-line error stays one line
            try:
                return datasets.load_dataset(kind, data_files=str(path), split="train")
            finally:
                if shown:
                    datasets.enable_progress_bars()
        require_hub_dataset(spec, key="general")
        return datasets.load_dataset(spec, split="train")
    except InputError:
        raise
    except Exception as err:  # datasets raises many types; report one line
        raise InputError(
            f"cannot load ({type(err).__name__}: {err})", key="general", value=spec
        ) from None


def load_general(spec: str, n: int, seed: int, *, repeat: bool = False) -> list[dict[str, Any]]:
    """Sample ``n`` general instruction rows: the alpaca schema (instruction, input, output) or
    prompt/response rows.

    ``spec`` is a local .json/.jsonl/.parquet file, a Hub dataset id (e.g.
    ``yahma/alpaca-cleaned``, the paper's choice) or ``scd:general`` (scd's own 160
    instructions, package data). ``repeat``: a source with fewer than ``n`` rows is gone
    through again (each pass in a new seeded order) until there are ``n``.
    """
    ds = _general_table(spec)
    cols = set(ds.column_names)
    if {"prompt", "response"} <= cols and "instruction" not in cols:
        ds = ds.rename_columns({"prompt": "instruction", "response": "output"})
    missing = {"instruction", "output"} - set(ds.column_names)
    if missing:
        raise InputError(
            f"missing columns {sorted(missing)} (instruction/output, the alpaca "
            "schema, or prompt/response)",
            key="general",
            value=spec,
        )
    if len(ds) == 0:
        raise InputError("no rows", key="general", value=spec)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(ds))[: min(n, len(ds))].tolist()
    while repeat and len(order) < n:
        order += rng.permutation(len(ds))[: n - len(order)].tolist()
    rows = []
    for k, i in enumerate(order):
        r = ds[i]
        user = r["instruction"] + (f"\n\n{r['input']}" if r.get("input") else "")
        pass_ = k // len(ds)
        rows.append(
            conversation_row(
                user, r["output"], f"general-{i}" + (f"-{pass_}" if pass_ else ""), "general", None
            )
        )
    return rows
