"""Small file helpers shared by every stage: atomic output files and directories, hashes, and
JSON, YAML and Parquet readers whose errors are one line naming the file."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from scd.errors import InputError, first_line

__all__ = [
    "atomic_file",
    "atomic_output_dir",
    "cache_key",
    "check_output_dir",
    "data_dir",
    "json_text",
    "looks_local",
    "model_cache",
    "read_json",
    "read_manifest",
    "read_parquet",
    "read_yaml",
    "sha256_file",
    "write_json",
]

_UMASK = os.umask(0o022)  # read the process umask (set it back at once)
os.umask(_UMASK)


def looks_local(spec: str) -> bool:
    """Whether ``spec`` reads as a local path rather than a Hub id (``owner/name``): it starts
    with ``/``, ``.`` or ``~``, holds a backslash or more than one slash, or its first part is an
    existing directory (``outputs/toy-modle``, ``data/bbq``). A missing path that looks local is
    "no such file or directory", never a Hub lookup."""
    return (
        spec.startswith(("/", ".", "~"))
        or "\\" in spec
        or spec.count("/") > 1
        or ("/" in spec and Path(spec.split("/", 1)[0]).is_dir())
    )


def read_manifest(directory: Path | str) -> dict[str, Any]:
    """What an scd output directory's ``manifest.json`` records (its ``kind``, sources, ...);
    empty when there is none or it cannot be read."""
    try:
        info = json.loads((Path(directory) / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


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
    parent = next((p for p in out.parents if p.exists()), out.parent)  # the nearest one there
    if not parent.is_dir():
        raise InputError(
            f"cannot write there ({parent} is a file, not a directory)",
            key="out",
            value=out,
        )
    if out.is_dir() and any(out.iterdir()):
        marker = out / "manifest.json"
        if not marker.is_file():
            raise InputError("directory is not empty and holds no scd output", key="out", value=out)
        old = read_manifest(out).get("kind")
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
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def data_dir() -> Path:
    """Where reference data is cached (HolisticBias under ``holistic_bias/<version>/``):
    ``$SCD_DATA_DIR``, else ``$XDG_CACHE_HOME/scd`` (default ``~/.cache/scd``)."""
    if env := os.environ.get("SCD_DATA_DIR"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scd"


def model_cache() -> Path:
    """Where models are cached (fetched wheels, converted GGUF files): ``$SCD_MODEL_CACHE``,
    else ``$XDG_CACHE_HOME/scd/models`` (default ``~/.cache/scd/models``) -- never inside
    ``$SCD_DATA_DIR``, which may be a shared or read-only mount of reference data."""
    if env := os.environ.get("SCD_MODEL_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scd" / "models"


def sha256_file(path: Path | str) -> str:
    """Return the hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _input_error(path: Path | str, detail: str, key: str | None) -> InputError:
    """An error naming ``path``: after the option ``key`` (``--terms PATH: ...``) when given."""
    return InputError(detail, key=key, value=path) if key else InputError(f"{path}: {detail}")


def _read_text(path: Path | str, key: str | None) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or first_line(err)  # "No such file or directory"
        raise _input_error(path, f"cannot read ({reason})", key) from None


def read_json(path: Path | str, *, key: str | None = None) -> Any:
    """The parsed contents of a UTF-8 JSON file.

    Args:
        path: the file.
        key: the option that named the file, if one did (errors then start with ``--key PATH``).

    Raises:
        InputError: one line naming the file: it cannot be read, or is not valid JSON (the
            parser's message and line).
    """
    try:
        return json.loads(_read_text(path, key))
    except json.JSONDecodeError as err:
        raise _input_error(path, f"not valid JSON ({err.msg}, line {err.lineno})", key) from None


def read_yaml(path: Path | str, *, key: str | None = None) -> Any:
    """The parsed contents of a UTF-8 YAML file (``yaml.safe_load``); ``key`` as in
    :func:`read_json`.

    Raises:
        InputError: one line naming the file: it cannot be read, or is not valid YAML (the
            parser's message and line).
    """
    import yaml

    try:
        return yaml.safe_load(_read_text(path, key))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        detail = f"not valid YAML ({getattr(err, 'problem', None) or first_line(err)}{where})"
        raise _input_error(path, detail, key) from None


def read_parquet(path: Path | str, columns: Iterable[str] = (), *, key: str | None = None) -> Any:
    """A Parquet file as an Arrow table that has (at least) ``columns``; ``key`` as in
    :func:`read_json`.

    Raises:
        InputError: one line naming the file: it is not readable Parquet, or lacks a column.
    """
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several kinds
        raise _input_error(path, f"not a readable Parquet file ({err})", key) from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise _input_error(path, f"missing columns {missing}", key)
    return table


def cache_key(**parts: Any) -> str:
    """A short, stable key for the JSON-serialisable ``parts``."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
