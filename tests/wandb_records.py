"""Reading an offline W&B run as the tests check it: its config and summary, without the network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.tracking import offline_records


def config_and_summary(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """An offline W&B run's config (at its start, then its updates) and summary, as values."""
    import json

    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for record in offline_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
        elif kind == "summary":
            summary.update({i.key: json.loads(i.value_json) for i in record.summary.update})
    return config, summary
