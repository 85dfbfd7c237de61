"""The reference datasets scd reads (HolisticBias, BBQ, CrowS-Pairs, WinoBias, Winogender),
declared once in ``src/scd/datasets.yaml``: each pinned to a commit of its public
repository, each file with its checksum, licence and citation.

:func:`ensure` gives a dataset's directory under ``$SCD_DATA_DIR`` (default ``~/.cache/scd``),
fetching and verifying the files that are missing: from ``$SCD_DATA_MIRROR/<name>/<path>`` when
a site mirrors them, else from the repository at its pinned commit. A file already there is
verified, never fetched again (a directory of reference data touches no network). A fetch that
fails -- the server says no, the body is cut short, the bytes are not the pinned ones, the
network is down -- is one line naming the dataset, the file and where to put it by hand, and
leaves nothing behind: a file is written to a temporary name and renamed into place only once
its checksum matches.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib.resources import files as package_files
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.io import atomic_file, data_dir, read_yaml

__all__ = [
    "MIRROR_ENV",
    "Dataset",
    "RefFile",
    "catalog",
    "ensure",
    "fetch",
    "provenance",
    "verify",
]

MIRROR_ENV = "SCD_DATA_MIRROR"
TIMEOUT = 60  # seconds without a byte before a fetch gives up


@dataclass(frozen=True)
class RefFile:
    """One file of a dataset: its path under the dataset's directory and what pins it."""

    path: str
    size: int | None
    sha256: str | None
    git_blob: str | None  # the repository tree's blob id: SHA-1 of "blob <size>\0" + bytes


@dataclass(frozen=True)
class Dataset:
    """A dataset as ``datasets.yaml`` declares it."""

    name: str
    repo: str
    commit: str
    source: str  # the directory of the repository its files are under
    root: str  # the directory, under the dataset's, that a benchmark's --data takes
    licence: str
    citation: str
    files: tuple[RefFile, ...]

    def url(self, f: RefFile) -> str:
        """Where ``f`` is fetched from: the mirror (``$SCD_DATA_MIRROR``), else the repository
        at the pinned commit."""
        mirror = os.environ.get(MIRROR_ENV, "").rstrip("/")
        if mirror:
            return f"{mirror}/{self.name}/{f.path}"
        base = "" if self.source in ("", ".") else f"{self.source}/"
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{base}{f.path}"

    def where(self) -> Path:
        """The dataset's directory: ``$SCD_DATA_DIR/<name>``."""
        return data_dir() / self.name

    def file(self, path: str) -> RefFile:
        """The declared file at ``path``.

        Raises:
            InputError: no such file in the dataset.
        """
        for f in self.files:
            if f.path == path:
                return f
        raise InputError(f"{self.name}: no file {path} (files: {', '.join(self.paths())})")

    def paths(self) -> list[str]:
        return [f.path for f in self.files]


@functools.cache
def catalog() -> dict[str, Dataset]:
    """Every declared dataset, by name."""
    raw = read_yaml(Path(str(package_files("scd") / "datasets.yaml")))
    return {
        name: Dataset(
            name,
            **{k: str(v) for k, v in d.items() if k != "files"},
            files=tuple(
                RefFile(path, f.get("size"), f.get("sha256"), f.get("git_blob"))
                for path, f in d["files"].items()
            ),
        )
        for name, d in raw.items()
    }


def dataset(name: str) -> Dataset:
    """The declared dataset ``name``.

    Raises:
        InputError: no such dataset (naming the declared ones).
    """
    found = catalog()
    if name not in found:
        raise InputError(
            f"not a dataset scd declares ({', '.join(found)})", key="dataset", value=name
        )
    return found[name]


def _digests(data: bytes) -> tuple[str, str]:
    """The sha256 of ``data`` and its git blob id."""
    blob = hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False)
    return hashlib.sha256(data).hexdigest(), blob.hexdigest()


def _mismatch(f: RefFile, data: bytes) -> str | None:
    """Why ``data`` is not ``f``'s pinned bytes, or None."""
    sha256, blob = _digests(data)
    if f.size is not None and len(data) != f.size:
        return f"{len(data):,} bytes where the pinned file has {f.size:,}"
    if f.sha256 is not None and sha256 != f.sha256:
        return f"sha256 {sha256[:12]}... where the pinned file's is {f.sha256[:12]}..."
    if f.sha256 is None and f.git_blob is not None and blob != f.git_blob:
        return f"git blob {blob[:12]}... where the pinned file's is {f.git_blob[:12]}..."
    return None


def _download(url: str) -> bytes:
    """The bytes at ``url``; a body shorter than its Content-Length is refused."""
    with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:  # noqa: S310 (http(s) URLs of ours)
        expected = resp.headers.get("Content-Length")
        try:
            data = resp.read()
        except http.client.IncompleteRead as err:
            data = err.partial
    if expected is not None and len(data) != int(expected):
        raise ConnectionError(f"cut short: {len(data):,} of {int(expected):,} bytes")
    return data


def _by_hand(d: Dataset, f: RefFile) -> str:
    return (
        f"put {f.path} in {d.where()} (github.com/{d.repo} @ {d.commit[:7]}, "
        f"{'' if d.source in ('', '.') else d.source + '/'}{f.path}), or set {MIRROR_ENV}"
    )


def _fetch_one(d: Dataset, f: RefFile) -> int:
    """Fetch ``f`` into place, verified; its size."""
    url = d.url(f)
    try:
        data = _download(url)
    except urllib.error.HTTPError as err:
        raise InputError(
            f"{d.name}: {url}: HTTP {err.code} {err.reason}; {_by_hand(d, f)}"
        ) from None
    except (OSError, ValueError) as err:  # URLError, timeouts, a connection cut short
        reason = getattr(err, "reason", None) or err
        raise InputError(f"{d.name}: {url}: {reason}; {_by_hand(d, f)}") from None
    if why := _mismatch(f, data):
        raise InputError(f"{d.name}: {url} gave {why}: not the pinned file; nothing was kept")
    path = d.where() / f.path
    try:
        with atomic_file(path) as tmp:
            tmp.write_bytes(data)
    except OSError as err:
        raise InputError(f"{d.name}: cannot write {path} ({err.strerror or err})") from None
    return len(data)


def _check_present(d: Dataset, f: RefFile) -> None:
    """Refuse a file that is there but not the pinned one."""
    path = d.where() / f.path
    if why := _mismatch(f, path.read_bytes()):
        raise InputError(
            f"{d.name}: {path} is {why}; remove it to fetch the pinned file again, or give "
            "your own copy with --data"
        )


def ensure(name: str, paths: list[str] | None = None, say: Any = None) -> Path:
    """The directory a benchmark's ``--data`` takes for dataset ``name`` (its ``root`` under
    ``$SCD_DATA_DIR/<name>``), with the files ``paths`` (default: every file) present and
    verified: those missing are fetched (``say`` gets a line for each, once it is in place).

    Raises:
        InputError: a file that is there but not the pinned one, or one that cannot be fetched
            (one line each; nothing partial is left).
    """
    d = dataset(name)
    for f in [d.file(p) for p in paths] if paths is not None else d.files:
        if (d.where() / f.path).is_file():
            _check_present(d, f)
            continue
        size = _fetch_one(d, f)
        if say is not None:
            say(f"fetched {d.name}/{f.path} ({size:,} bytes, verified) from {d.url(f)}")
    return d.where() / d.root if d.root not in ("", ".") else d.where()


def fetch(name: str, say: Any = print) -> Path:
    """Every file of ``name``, fetched where missing and verified (:func:`ensure`)."""
    return ensure(name, say=say)


def verify(name: str) -> list[dict[str, Any]]:
    """Each file of ``name``: ``{path, status}``, status ``ok``, ``missing`` or what differs."""
    d = dataset(name)
    out = []
    for f in d.files:
        path = d.where() / f.path
        status = "missing" if not path.is_file() else _mismatch(f, path.read_bytes()) or "ok"
        out.append({"path": f.path, "status": status})
    return out


def provenance(inputs: dict[str, Path]) -> dict[str, Any] | None:
    """Which declared dataset the files ``inputs`` are, by their bytes: ``{name, repo, commit,
    files: {path: sha256}}`` when every file is a pinned one of a single dataset, else None
    (a copy of your own)."""
    from scd.io import sha256_file

    if not inputs:
        return None
    found: dict[str, dict[str, str]] = {}
    for p in inputs.values():
        sha = sha256_file(p)
        hits = [(d, f) for d in catalog().values() for f in d.files if f.sha256 == sha]
        if not hits:
            return None
        for d, f in hits:
            found.setdefault(d.name, {})[f.path] = sha
    name = next((n for n, got in found.items() if len(got) >= len(inputs)), None)
    if name is None:
        return None
    d = catalog()[name]
    return {"name": name, "repo": d.repo, "commit": d.commit, "files": found[name]}
