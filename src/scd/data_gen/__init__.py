"""Prompt generation: descriptors, contact templates, prompt sets, the 8 settings, SFT data."""

import hashlib
from importlib.resources import files
from pathlib import Path


def data_path(name: str) -> Path:
    """A packaged data file: ``scd/data_gen/data/<name>``."""
    return Path(str(files("scd.data_gen") / "data" / name))


def content_id(*parts: object) -> str:
    """A stable row id: a short hash of ``parts`` joined by "|" (same content, same id)."""
    return hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).hexdigest()
