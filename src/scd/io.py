"""Small file helpers shared by every stage: atomic output files and directories, hashes, JSON."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scd.errors import InputError

__all__ = [
    "atomic_file", "atomic_output_dir", "check_output_dir", "data_dir", "json_text",
    "sha256_file", "write_json",
]  # fmt: skip

MARKER = "manifest.json"

_UMASK = os.umask(0o022)  # read the process umask (set it back at once)
os.umask(_UMASK)


def check_output_dir(out: Path | str, kind: str | None = None) -> Path:
    """Refuse an output directory that scd may not (re)place, before any work is done.

    ``out`` may be missing, empty, or an earlier scd output of the same ``kind`` (its
    ``manifest.json`` says so); its parent must be (or become) a directory.

    Raises:
        InputError: naming ``out`` and what is in the way.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", key="out", value=out)
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(
                    f"cannot write there ({parent} is a file, not a directory)",
                    key="out",
                    value=out,
                )
            break
    if out.is_dir() and any(out.iterdir()):
        marker = out / MARKER
        if not marker.is_file():
            raise InputError("directory is not empty and holds no scd output", key="out", value=out)
        try:
            old = json.loads(marker.read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            old = None
        if kind is not None and old != kind:
            raise InputError(
                f"holds a {old or 'different'} output, not {kind}; choose another "
                "--out (or remove it)",
                key="out",
                value=out,
            )
    return out


@contextlib.contextmanager
def atomic_output_dir(out: Path | str, kind: str | None = None) -> Iterator[Path]:
    """Yield a temporary directory beside ``out`` that replaces ``out`` only on success.

    Nothing is half-written: if the body raises, the temporary directory is removed and ``out``
    is left as it was. An existing ``out`` is replaced only if it is empty or an earlier scd
    output of the same ``kind`` (see :func:`check_output_dir`).

    Raises:
        InputError: ``out`` cannot be created, or exists and holds something else.
    """
    out = check_output_dir(out, kind)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; outputs are ordinary directories
    except OSError as err:
        raise InputError(
            f"cannot write there ({err.strerror or err})", key="out", value=out
        ) from None
    try:
        yield tmp
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def data_dir() -> Path:
    """Where reference data and converted models are cached: ``$SCD_DATA_DIR`` or
    ``$XDG_CACHE_HOME/scd`` (default ``~/.cache/scd``)."""
    env = os.environ.get("SCD_DATA_DIR")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "scd"


def sha256_file(path: Path | str) -> str:
    """Return the hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def json_text(data: Any) -> str:
    """``data`` as stable, human-readable JSON (sorted keys, newline at the end)."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@contextlib.contextmanager
def atomic_file(path: Path | str) -> Iterator[Path]:
    """Yield an empty temporary file beside ``path`` (directory created if missing) for the body
    to write; it replaces ``path`` (``os.replace``) if the body returns, and is removed if not."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes it private; outputs are ordinary files
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path | str, data: Any) -> None:
    """Write ``data`` as :func:`json_text`, atomically (see :func:`atomic_file`)."""
    with atomic_file(path) as tmp:
        tmp.write_text(json_text(data), encoding="utf-8")
