"""Weights & Biases set-up that never blocks and never leaks a secret.

Without an API key, or without a route to the W&B server, runs go offline automatically
(``WANDB_MODE=offline``; sync later with ``wandb sync``). An explicit ``WANDB_MODE`` wins.
Configs are scrubbed of anything that looks like a token before they are logged or saved.
"""

from __future__ import annotations

import netrc
import os
import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "SECRET_ENV",
    "choose_mode",
    "finish_run",
    "held_step",
    "offline_folders",
    "offline_records",
    "redact",
    "start_run",
]

SECRET_ENV = (
    "WANDB_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_API_TOKEN",
    "OPENAI_API_KEY",
)
_SECRET_KEY = re.compile(r"(token|api_key|apikey|secret|password)", re.IGNORECASE)


def _has_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc().authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return bool(auth and auth[2])


def _reachable(host: str = "api.wandb.ai", port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def choose_mode() -> str:
    """``WANDB_MODE`` if set, else online with a key and a network, else offline."""
    return os.environ.get("WANDB_MODE") or ("online" if _has_key() and _reachable() else "offline")


def _key_envs(data: Any) -> list[str]:
    """The environment variables a config names as holding a key (``api_key_env``)."""
    if isinstance(data, dict):
        own = [v for k, v in data.items() if k == "api_key_env" and isinstance(v, str)]
        return own + [n for v in data.values() for n in _key_envs(v)]
    return [n for v in data for n in _key_envs(v)] if isinstance(data, list) else []


def redact(data: Any, secrets: list[str] | None = None) -> Any:
    """Copy of ``data`` with secret-looking keys and the values of secret environment variables
    (:data:`SECRET_ENV` and those ``api_key_env`` names) replaced; a key ending in ``_env``
    names a variable and is kept."""
    if secrets is None:
        names = [*SECRET_ENV, *_key_envs(data)]
        # a placeholder such as OPENAI_API_KEY=EMPTY (local servers) is no secret to hunt for
        secrets = [os.environ[k] for k in names if len(os.environ.get(k) or "") >= 8]
    if isinstance(data, dict):
        return {k: "<redacted>" if _secret(k, v) else redact(v, secrets) for k, v in data.items()}
    if isinstance(data, list):
        return [redact(v, secrets) for v in data]
    if isinstance(data, str):
        for secret in secrets:
            data = data.replace(secret, "<redacted>")
    return data


# keys that name a tokenizer's special tokens or count tokens: no secrets
_NOT_SECRET = re.compile(r"(pad|eos|bos|unk|sep|cls|mask)_token(_id)?|.*tokens.*", re.IGNORECASE)


def _secret(key: Any, value: Any) -> bool:
    """Whether ``key: value`` holds a secret: a key named like one (not a variable's name,
    ``*_env``; not a tokenizer's special token), with a value that is neither empty nor a flag."""
    name = str(key)
    named = _SECRET_KEY.search(name) and not _NOT_SECRET.fullmatch(name)
    return bool(named and value) and not name.endswith("_env") and not isinstance(value, bool)


def start_run(
    *, config: dict[str, Any], directory: Path, run_id: str | None = None, **init: Any
) -> Any:
    """Start a W&B run with the given config, writing into ``directory``/wandb (passed to this
    run: ``WANDB_DIR`` would stick to the first run of the process); returns the run.
    ``init``: the rest of ``wandb.init``'s arguments (project, name, group, entity, job_type).

    ``run_id``: continue that run (``resume="allow"``). Offline, each process writes its own
    folder of the one run id (W&B never appends to another process's folder); ``wandb sync`` of
    them all uploads them in order of start time into that one run. A process that logs
    history into a continued run logs at steps after :func:`held_step`, so that the run's
    history has each step once, in order."""
    mode = choose_mode()
    os.environ["WANDB_MODE"] = mode  # also for the transformers callback
    os.environ.setdefault("WANDB_SILENT", "true")
    directory.mkdir(parents=True, exist_ok=True)
    import wandb

    return wandb.init(
        **init,
        config=redact(config),
        dir=str(directory),
        mode=mode,
        reinit="finish_previous",
        id=run_id,
        resume="allow" if run_id else None,
    )


def finish_run(run: Any, say: Any = None) -> None:
    """Finish ``run``; an offline one says where it is and how to upload it (``say``: a line
    printer, default stderr)."""
    offline = run.settings.mode == "offline"
    where = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>
    run.finish()
    if offline:
        from scd.progress import say as stderr

        every = f"{where.parent}/offline-run-*-{run.id}*"  # every process's folder of the run
        (say or stderr)(f"W&B run {run.id} (offline) in {where}; upload: wandb sync {every}")


def offline_records(run_dir: Path) -> Iterator[Any]:
    """The records of one offline W&B run folder, in order: its ``.wandb`` transaction log, a
    LevelDB-style log (32 KiB blocks of pieces with a 7-byte header each, after the file's
    7-byte header) of W&B's protobuf ``Record``; the last, unfinished record of a killed
    process is not yielded. W&B ships no reader of its own."""
    from wandb.proto import wandb_internal_pb2

    files = sorted(Path(run_dir).glob("*.wandb"))
    data, pos, piece = (files[0].read_bytes() if files else b""), 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, size, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (size == 0 and kind == 0):  # the rest of a block is padding
            pos += left
            continue
        piece, pos = piece + data[pos + 7 : pos + 7 + size], pos + 7 + size
        if kind in (1, 4) and pos <= len(data):  # a whole record, or its last piece
            record = wandb_internal_pb2.Record()
            record.ParseFromString(piece)
            yield record
            piece = b""


def offline_folders(directory: Path, run_id: str) -> list[Path]:
    """The offline folders of run ``run_id`` in a W&B directory, oldest first: one per process
    that wrote to it (``offline-run-<time>-<id>``, with ``-<n>`` added by W&B when two start in
    the same second)."""
    name = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(run_id)}(-\d+)?")
    found = Path(directory).glob(f"offline-run-*-{run_id}*")
    return sorted(p for p in found if name.fullmatch(p.name))


def held_step(run: Any) -> int:
    """The last history step (``_step``) that earlier processes wrote to this run, -1 if none:
    offline, read from the other folders of its id beside this one (see :func:`start_run`);
    online, what W&B's server says the resumed run holds."""
    if run.settings.mode != "offline":
        return int(run.step) - 1 if getattr(run, "resumed", False) else -1
    here = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>
    steps = [
        record.history.step.num
        for folder in offline_folders(here.parent, run.id)
        if folder != here
        for record in offline_records(folder)
        if record.WhichOneof("record_type") == "history"
    ]
    return max(steps, default=-1)
