"""Resumable per-item records (JSONL), shared by every evaluation.

Work is done in fixed chunks of the (deterministic) work list, and each chunk's records are
appended with a single write + fsync. A run killed at any point -- even mid-write -- leaves whole
chunks plus at most a torn tail; resuming truncates to the last whole chunk and recomputes from
there with the same chunk boundaries, so the final file equals an uninterrupted run's, byte for
byte (same batches, same floats), with no item lost or duplicated.

Beside the records, ``timing.jsonl`` holds one line per whole chunk -- its items and the seconds
it took to score -- cut back with the records on resume, so the scoring time of a run killed and
resumed across processes is the sum of its lines (a chunk recomputed is counted once); a sharded
run's joins its shards' (:func:`merge_timing`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from scd.config.threads import chosen
from scd.errors import InputError
from scd.io import atomic_file, write_json

__all__ = [
    "RecordLog",
    "check_run_config",
    "dump_record",
    "merge_timing",
    "read_records",
    "scoring_time",
]


def dump_record(record: dict[str, Any]) -> str:
    """One JSON line (keys in insertion order, no trailing spaces)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def check_run_config(
    out: Path, config: dict[str, Any], defaults: dict[str, Any] | None = None, write: bool = True
) -> None:
    """Check that a resumed run has the same configuration; write ``out/run.json`` if new, with
    every key of ``defaults`` the configuration lacks at its default, so that the file names
    each option the result depends on (the protocol and rule of a default bias run too). A key
    of ``defaults`` that one of the two configurations lacks stands for its value there (a key
    pinned only when not its default, or one added later: a ``run.json`` of scd 0.1.0 may lack
    ``dtype``, which was ``auto`` then).

    The file also records, unpinned, ``threads``: torch's threads in the process that wrote it
    (:mod:`scd.config.threads`), a speed setting a resumed run need not match (another count
    may move a score in its fifth decimal, as another machine may: SmolLM2 on 1 or 2 threads,
    |diff| <= 3e-5).

    Raises:
        InputError: ``out`` holds a run with another configuration.
    """
    path = out / "run.json"
    if out.is_dir() and not path.exists() and any(out.iterdir()):
        raise InputError(
            "directory is not empty and holds no scd evaluation; choose another "
            "--out (results would be mixed into it)",
            key="out",
            value=out,
        )
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except json.JSONDecodeError:
            old = None
        new = json.loads(json.dumps({**(defaults or {}), **config}))
        if isinstance(old, dict):
            old = json.loads(json.dumps({**(defaults or {}), **old}))
            old.pop("threads", None)  # recorded, not pinned
        if old != new:
            diff = sorted(k for k in set(new) | set(old or {}) if (old or {}).get(k) != new.get(k))
            raise InputError(
                f"holds a run with another configuration ({', '.join(diff[:4])} "
                "differ); use a new --out or the same options to resume",
                key="out",
                value=out,
            )
        return
    if write:
        threads = {"threads": chosen()} if chosen() is not None else {}
        write_json(path, {**(defaults or {}), **config, **threads})


def read_records(path: Path | str) -> list[dict[str, Any]]:
    """The records of a records file.

    Raises:
        InputError: the file is missing.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no records (not an evaluation directory)")
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def scoring_time(out: Path | str) -> tuple[int, float]:
    """(items, seconds) of the chunks timed in the evaluation directory ``out``: the scoring
    alone, without loading the model, summed over every process that worked on it (a sharded
    run's shards too). (0, 0.0) when none was timed."""
    path, items, seconds = Path(out) / "timing.jsonl", 0, 0.0
    for line in path.read_text().splitlines() if path.is_file() else []:
        chunk = json.loads(line)
        items, seconds = items + chunk["stop"] - chunk["start"], seconds + chunk["seconds"]
    return items, seconds


def merge_timing(shards: list[tuple[int, Path]], out: Path) -> None:
    """Write ``out/timing.jsonl`` from each shard's (its first item's index, its directory), the
    chunks numbered in the whole work list."""
    lines = []
    for offset, shard in shards:
        path = shard / "timing.jsonl"
        for line in path.read_text().splitlines() if path.is_file() else []:
            chunk = json.loads(line)
            chunk |= {"start": chunk["start"] + offset, "stop": chunk["stop"] + offset}
            lines.append(dump_record(chunk) + "\n")
    with atomic_file(out / "timing.jsonl") as tmp:
        tmp.write_text("".join(lines), encoding="utf-8")


def _chunk_stop(line: str) -> float:
    """Where a ``timing.jsonl`` line's chunk ends; infinity for a torn or unreadable line."""
    try:
        return json.loads(line)["stop"] if line.endswith("\n") else float("inf")
    except (ValueError, KeyError, TypeError):
        return float("inf")


class RecordLog:
    """Append-only records file with chunk-aligned resume, and each chunk's scoring time."""

    def __init__(self, path: Path, chunk_size: int, total: int) -> None:
        if chunk_size < 1:
            raise InputError("expected a positive number", key="chunk_size", value=chunk_size)
        self.path = path
        self.timing = path.with_name("timing.jsonl")
        self.chunk_size = chunk_size
        self.total = total
        self.done = self._recover()
        self._started = time.perf_counter()

    def _recover(self) -> int:
        """Truncate to the last whole chunk; return how many items it holds."""
        keep = 0
        if self.path.exists():
            data = self.path.read_bytes()
            lines = data.count(b"\n")
            keep = lines if lines >= self.total else (lines // self.chunk_size) * self.chunk_size
            if keep > self.total:
                raise InputError(f"{self.path}: holds more records than the run has items")
            cut = len(data) - len(data.split(b"\n", keep)[-1])  # the end of line ``keep``
            if cut != len(data):
                with open(self.path, "r+b") as fh:
                    fh.truncate(cut)
                    fh.flush()
                    os.fsync(fh.fileno())
        self._cut_timing(keep)
        return keep

    def _cut_timing(self, keep: int) -> None:
        """Keep the times of the chunks whose records were kept (whole, readable lines)."""
        if not self.timing.exists():
            return
        lines = self.timing.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if _chunk_stop(line) <= keep]
        if len(kept) < len(lines):
            with atomic_file(self.timing) as tmp:
                tmp.write_text("".join(kept), encoding="utf-8")

    def chunks(self) -> Iterator[tuple[int, int]]:
        """(start, stop) of each chunk still to do; each is timed from here to its append."""
        for start in range(self.done, self.total, self.chunk_size):
            self._started = time.perf_counter()
            yield start, min(start + self.chunk_size, self.total)

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append one chunk's time, then its records in a single write, then fsync (a time
        whose records did not land is dropped on resume, so each chunk is timed once)."""
        payload = "".join(dump_record(r) + "\n" for r in records).encode("utf-8")
        stop = self.done + payload.count(b"\n")
        chunk = {
            "start": self.done,
            "stop": stop,
            "seconds": round(time.perf_counter() - self._started, 3),
        }
        with open(self.timing, "a", encoding="utf-8") as fh:
            fh.write(dump_record(chunk) + "\n")
        with open(self.path, "ab") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        self.done = stop

    def read(self) -> list[dict[str, Any]]:
        """All records written so far."""
        return read_records(self.path) if self.path.exists() else []
