"""Reading an offline W&B run as the tests check it: its records, without the network."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any


def wandb_records(run_dir: Path) -> Iterator[Any]:
    """The records of an offline W&B run directory (its ``.wandb`` file: a LevelDB-style log of
    protobuf records after a 7-byte header)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data, pos, frag = next(run_dir.glob("*.wandb")).read_bytes(), 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, size, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (size == 0 and kind == 0):  # the rest of a block is padding
            pos += left
            continue
        frag, pos = frag + data[pos + 7 : pos + 7 + size], pos + 7 + size
        if kind in (1, 4):  # a whole record, or its last piece
            record = wandb_internal_pb2.Record()
            record.ParseFromString(frag)
            yield record
            frag = b""


def config_and_summary(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """An offline W&B run's config (at its start, then its updates) and summary, as values."""
    import json

    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for record in wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
        elif kind == "summary":
            summary.update({i.key: json.loads(i.value_json) for i in record.summary.update})
    return config, summary
