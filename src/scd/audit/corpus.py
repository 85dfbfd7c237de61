"""A corpus for the SCM audit: read it, split it into sentences, keep those that mention an
illness term, and encode sentences with a sentence-transformers model (embeddings cached).

Term matching (:class:`TermMatcher`) is case-insensitive and on word boundaries: a term matches
as a whole word or phrase, so "cancer" does not match "cancerous", "ADHD" matches "adhd" and
"ADHD-like", and a multi-word term matches across any run of spaces ("panic   disorder"). Terms
are matched as written: the AQ-27 list's "a cold" and "the flu" keep their article (bare "cold"
is an SCM adjective: "cold people" is not an illness) and plurals are not derived ("migraines"
does not match "migraine"); a term ending in "'s" also matches without it ("Alzheimer's",
"Alzheimer"). Pass a terms YAML to match other forms.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from scd.errors import InputError, first_line
from scd.hub import require_hub_dataset
from scd.io import atomic_file, looks_local, read_parquet, read_yaml

__all__ = ["TermMatcher", "encode", "load_terms", "read_corpus", "split_sentences"]

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[.!?…][\"'”’)\]])\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences of a text: split after ``.``, ``!``, ``?`` or ``…`` followed by space."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def load_terms(path: Path | str | None = None, language: str = "en") -> dict[str, list[str]]:
    """Illness terms by type (``mental``, ``physical``): a YAML mapping, or the AQ-27 word lists
    of ``language`` (Mina et al. 2024, Appendix A.1)."""
    if path is None:
        from scd.data_gen.stigma_probes import load_aq27_spec

        spec = load_aq27_spec(language=language)
        return {kind: list(terms) for kind, terms in spec.illnesses.items()}
    data = read_yaml(path, key="terms")
    if (
        not isinstance(data, dict)
        or not data
        or not all(
            isinstance(v, list) and v and all(isinstance(t, str) and t.strip() for t in v)
            for v in data.values()
        )
    ):
        raise InputError(
            "expected a mapping of illness type -> list of terms (e.g. mental: "
            "[depression, anxiety])",
            key="terms",
            value=path,
        )
    return {str(k): [t.strip() for t in v] for k, v in data.items()}


class TermMatcher:
    """Which terms of each type a sentence mentions (module docstring)."""

    def __init__(self, terms: dict[str, list[str]]) -> None:
        self.patterns = {
            kind: [(term, re.compile(_pattern(term), re.IGNORECASE)) for term in words]
            for kind, words in terms.items()
        }
        self.any = {  # one pass per type first: most sentences of a corpus name no illness
            kind: re.compile("|".join(_pattern(t) for t in words), re.IGNORECASE)
            for kind, words in terms.items()
        }

    def find(self, sentence: str) -> dict[str, list[str]]:
        """``{type: [terms found]}`` for the types the sentence mentions."""
        hits = {
            kind: [term for term, pattern in patterns if pattern.search(sentence)]
            for kind, patterns in self.patterns.items()
            if self.any[kind].search(sentence)
        }
        return {kind: terms for kind, terms in hits.items() if terms}


def _pattern(term: str) -> str:
    base = term[:-2] if term.endswith(("'s", "’s")) else term
    body = r"\s+".join(re.escape(w) for w in base.split())
    suffix = r"(?:['’]s)?" if base != term else ""
    return rf"(?<!\w){body}{suffix}(?!\w)"


def read_corpus(source: str, text_column: str = "text") -> list[str]:
    """The documents of a corpus: a text file (one document per line), JSONL or Parquet with a
    text column, or a Hub dataset id (its ``train`` split).

    Raises:
        InputError: a missing source, a table without the text column, or no text at all.
    """
    path = Path(source)
    if path.is_file():
        if path.suffix in (".jsonl", ".json"):
            rows = _json_lines(path)
        elif path.suffix == ".parquet":
            rows = read_parquet(path, key="corpus").to_pylist()
        else:
            try:
                return _nonempty(path.read_text(encoding="utf-8").splitlines(), source)
            except UnicodeDecodeError:
                raise InputError("not UTF-8 text", key="corpus", value=path) from None
    elif (
        path.exists()
        or looks_local(source)
        or source.count("/") != 1
        or path.suffix in (".txt", ".jsonl", ".json", ".parquet")
    ):
        raise InputError(
            "no such file (a .txt, .jsonl or .parquet file, or a Hub dataset id owner/name)",
            key="corpus",
            value=source,
        )
    else:
        rows = _hub_rows(source)
    if rows and text_column not in rows[0]:
        raise InputError(
            f"no column {text_column!r} (columns: {', '.join(sorted(rows[0]))}); "
            "name it with --text-column",
            key="corpus",
            value=source,
        )
    return _nonempty([str(r.get(text_column) or "") for r in rows], source)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise InputError(f"line {n} is not JSON", key="corpus", value=path) from None
            if not isinstance(row, dict):
                raise InputError(f"line {n} is not a JSON object", key="corpus", value=path)
            rows.append(row)
    return rows


def _hub_rows(name: str) -> list[dict[str, Any]]:
    from datasets import load_dataset

    require_hub_dataset(name, key="corpus")
    try:
        return load_dataset(name, split="train").to_list()
    except Exception as err:  # noqa: BLE001 -- network, auth, missing dataset
        first = first_line(err)
        raise InputError(f"cannot load the dataset ({first})", key="corpus", value=name) from None


def _nonempty(documents: list[str], source: str) -> list[str]:
    documents = [d for d in documents if d.strip()]
    if not documents:
        raise InputError("no text in the corpus", key="corpus", value=source)
    return documents


def fingerprint(texts: Iterable[str]) -> str:
    """A content hash of a list of texts."""
    return hashlib.sha256(b"".join(t.encode("utf-8") + b"\0" for t in texts)).hexdigest()[:16]


def encode(
    model: Any, texts: list[str], cache: Path | None, key: str, progress: bool, batch_size: int
) -> np.ndarray:
    """Unit-length sentence embeddings of ``texts``, cached in ``cache/<key>-<texts hash>.npy``
    (``key``: the encoder's fingerprint)."""
    path = cache / f"{key}-{fingerprint(texts)}.npy" if cache is not None else None
    if path is not None and path.is_file():
        return np.load(path, allow_pickle=False)
    vectors = model.encode(
        texts,
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=progress,
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as tmp, open(tmp, "wb") as handle:
            np.save(handle, vectors, allow_pickle=False)
    return vectors
