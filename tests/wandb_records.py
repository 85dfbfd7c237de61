"""Reading an offline W&B run as the tests check it: its config and summary, without the network."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from scd.tracking import offline_records


def finished_records(run_dir: Path, timeout: float = 60.0, *, killed: bool = False) -> list[Any]:
    """The records of a finished offline W&B run folder. W&B's service process writes them: the
    last ones (up to ``exit``) may land a moment after ``finish()`` returns, so this waits for
    ``exit`` (up to ``timeout`` seconds, then returns what is there). A run whose process was
    killed never writes ``exit`` (``killed``): this waits instead until its file has not grown
    for a second (its service, left behind, flushes what it holds and stops)."""
    deadline = time.monotonic() + timeout
    size = -1
    while True:
        records = list(offline_records(run_dir))
        if killed:
            now = sum(f.stat().st_size for f in Path(run_dir).glob("*.wandb"))
            done, size = now == size, now
        else:
            done = bool(records) and records[-1].WhichOneof("record_type") == "exit"
        if done or time.monotonic() > deadline:
            return records
        time.sleep(1.0 if killed else 0.1)


def config_and_summary(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """An offline W&B run's config (at its start, then its updates) and summary, as values."""
    import json

    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for record in finished_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
        elif kind == "summary":
            summary.update({i.key: json.loads(i.value_json) for i in record.summary.update})
    return config, summary
