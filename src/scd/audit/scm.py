"""The computational Stereotype Content Model (SCM) of Fraser, Kiritchenko & Nejadgholi (2022),
in the configuration Mina et al. (2024) used: an axis-rotated POLAR model on PLS components.
Implemented here from the method's description, with scikit-learn and numpy.

Training. Seed sentences (``Sentence,Target`` CSV; ``<target>`` is filled with "these people")
are labelled warm, cold, comp, incomp, or a pair (warm_comp, warm_incomp, cold_comp,
cold_incomp). Their sentence embeddings (unit length) are reduced to 10 components by a PLS
regression on the labels' (competence, warmth) signs. The two diagonals of the SCM plane are the
POLAR directions: warm+competent minus cold+incompetent, and warm+incompetent minus
cold+competent, each from the unit centroids of the two-adjective sentences of those quadrants;
the pseudo-inverse of the direction matrix gives each sentence its coordinates on the diagonals,
and a fixed 45 degree rotation turns them into warmth and competence.

Scoring. A sentence's embedding is reduced by the PLS, scaled to unit length and projected; the
sign of each axis says high or low (0 counts as high). Accuracy (:func:`accuracy`): a
one-adjective sentence is right when the sign of its axis matches, a two-adjective sentence when
both do.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scd.errors import InputError
from scd.io import atomic_output_dir

__all__ = [
    "FILLER",
    "LABELS",
    "N_COMPONENTS",
    "SCMModel",
    "SeedSentence",
    "accuracy",
    "adjective_folds",
    "cross_validate",
    "load_seeds",
]

TARGET = "<target>"
FILLER = "these people"  # what <target> becomes (Fraser et al.'s cross-validation sentences)
LABELS = {  # label -> (competence, warmth) signs
    "warm": (0, 1),
    "cold": (0, -1),
    "comp": (1, 0),
    "incomp": (-1, 0),
    "warm_comp": (1, 1),
    "warm_incomp": (-1, 1),
    "cold_comp": (1, -1),
    "cold_incomp": (-1, -1),
}
QUADRANTS = ("warm_comp", "warm_incomp", "cold_comp", "cold_incomp")
N_COMPONENTS = 10


@dataclass(frozen=True)
class SeedSentence:
    """A training sentence, its label and its seed adjectives (the unit of cross-validation)."""

    text: str
    label: str
    words: tuple[str, ...]


def _words(text: str, label: str) -> tuple[str, ...]:
    """The seed adjectives: the last word, or the two joined by the last "and"."""
    tokens = re.findall(r"[\w'-]+", text.lower())
    if label in QUADRANTS and len(tokens) >= 3 and tokens[-2] == "and":
        return (tokens[-3], tokens[-1])
    return tuple(tokens[-2:]) if label in QUADRANTS else tuple(tokens[-1:])


def load_seeds(paths: Sequence[Path | str]) -> list[SeedSentence]:
    """Read seed CSV files (``Sentence,Target``), or every ``*.csv`` of a directory that has
    those columns.

    Raises:
        InputError: a missing file, missing columns, a sentence without ``<target>``, an unknown
            label, or no sentences of some quadrant (the POLAR directions need all four).
    """
    files: list[tuple[Path, bool]] = []  # (file, named itself: it must have the columns)
    for p in map(Path, paths):
        if p.is_dir():
            files += [(f, False) for f in sorted(p.glob("*.csv"))]
        elif p.is_file():
            files.append((p, True))
        else:
            raise InputError("no such file or directory", key="seeds", value=p)
    seeds = []
    for f, named in files:
        with open(f, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            if not {"Sentence", "Target"} <= set(reader.fieldnames or []):
                if not named:
                    continue
                raise InputError(
                    f"expected columns Sentence,Target (found {reader.fieldnames})",
                    key="seeds",
                    value=f,
                )
            for n, row in enumerate(reader, start=2):
                text, label = (row["Sentence"] or "").strip(), (row["Target"] or "").strip()
                if TARGET not in text:
                    raise InputError(f"line {n}: no {TARGET} in {text!r}", key="seeds", value=f)
                if label not in LABELS:
                    raise InputError(
                        f"line {n}: label {label!r} is not one of {', '.join(LABELS)}",
                        key="seeds",
                        value=f,
                    )
                seeds.append(SeedSentence(text.replace(TARGET, FILLER), label, _words(text, label)))
    missing = [q for q in QUADRANTS if not any(s.label == q for s in seeds)]
    if not seeds or missing:
        raise InputError(
            f"no two-adjective sentences of {', '.join(missing or QUADRANTS)} (the "
            "warmth and competence directions need all four)",
            key="seeds",
            value=", ".join(map(str, paths)),
        )
    return seeds


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm == 0, 1, norm)


@dataclass
class SCMModel:
    """A trained SCM model: the PLS reduction and the POLAR projection (``x_mean``, ``x_std``,
    ``rotations``: the PLS transform; ``polar``: components -> the two diagonals)."""

    x_mean: np.ndarray
    x_std: np.ndarray
    rotations: np.ndarray
    polar: np.ndarray

    @classmethod
    def fit(cls, embeddings: np.ndarray, labels: Sequence[str]) -> SCMModel:
        """Train on sentence embeddings (one row per sentence) and their labels."""
        from sklearn.cross_decomposition import PLSRegression

        x = np.asarray(embeddings, dtype=np.float64)
        y = np.array([LABELS[label] for label in labels], dtype=np.float64)
        k = min(N_COMPONENTS, x.shape[1], len(x) - 1)
        pls = PLSRegression(n_components=k, scale=True).fit(x, y)
        std = x.std(axis=0, ddof=1)
        model = cls(x.mean(axis=0), np.where(std == 0, 1, std), pls.x_rotations_, np.eye(k, 2))
        z = model.reduce(x)
        if not np.allclose(z, pls.transform(x), atol=1e-6):  # scikit-learn changed its transform
            raise RuntimeError("the PLS reduction differs from scikit-learn's PLSRegression")
        labels = np.asarray(labels)
        centroid = {q: _unit(z[labels == q].mean(axis=0)) for q in QUADRANTS}
        diagonals = np.stack(
            [
                _unit(centroid["warm_comp"] - centroid["cold_incomp"]),
                _unit(centroid["warm_incomp"] - centroid["cold_comp"]),
            ]
        )
        model.polar = np.linalg.pinv(diagonals)
        return model

    def reduce(self, embeddings: np.ndarray) -> np.ndarray:
        """The PLS components of embeddings."""
        x = np.asarray(embeddings, dtype=np.float64)
        return ((x - self.x_mean) / self.x_std) @ self.rotations

    def score(self, embeddings: np.ndarray) -> np.ndarray:
        """``(n, 2)``: warmth and competence of each embedding."""
        diag = _unit(self.reduce(embeddings)) @ self.polar  # warm+comp, warm+incomp diagonals
        return diag @ np.array([[1.0, 1.0], [1.0, -1.0]]) / np.sqrt(2)  # warmth, competence

    def save(self, out: Path | str, info: dict[str, Any]) -> None:
        """Write ``scm.npz`` (arrays, no pickle) and ``manifest.json`` (``info``) atomically."""
        with atomic_output_dir(out, kind="scd_scm_model") as tmp:
            np.savez(
                tmp / "scm.npz",
                x_mean=self.x_mean,
                x_std=self.x_std,
                rotations=self.rotations,
                polar=self.polar,
            )
            manifest = {"kind": "scd_scm_model", **info}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path | str) -> SCMModel:
        with np.load(Path(path) / "scm.npz", allow_pickle=False) as arrays:
            return cls(*(arrays[k] for k in ("x_mean", "x_std", "rotations", "polar")))


def accuracy(scores: np.ndarray, labels: Sequence[str]) -> float:
    """Share of sentences on the right side of their label's axis (both axes for a pair)."""
    want = np.array([LABELS[lab][::-1] for lab in labels]).reshape(-1, 2)  # (warmth, competence)
    right = ((want == 0) | ((np.asarray(scores) >= 0) == (want > 0))).all(axis=1)
    return float(right.mean()) if len(right) else float("nan")


def adjective_folds(seeds: list[SeedSentence], folds: int = 5, seed: int = 0) -> dict[str, int]:
    """Each seed adjective's fold: a seeded shuffle per label (warm, cold, comp, incomp) dealt
    round-robin, so that every fold holds a share of each."""
    rng = np.random.default_rng(seed)
    fold_of: dict[str, int] = {}
    for label in ("warm", "cold", "comp", "incomp"):
        words = sorted({w for s in seeds if s.label == label for w in s.words} - set(fold_of))
        for i, word in enumerate(rng.permutation(words)):
            fold_of[str(word)] = i % folds
    return fold_of


def cross_validate(
    seeds: list[SeedSentence],
    embed: Callable[[list[str]], np.ndarray],
    folds: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Fraser et al.'s protocol on the seed sentences: folds over seed adjectives (balanced over
    warm, cold, comp, incomp), so that no test adjective is seen in training. Per fold: train on
    the sentences of the other adjectives; test one-adjective sentences of the held-out ones
    ("basic functionality") and pairs of two held-out adjectives ("composition")."""
    vectors = embed([s.text for s in seeds])
    fold_of = adjective_folds(seeds, folds, seed)
    results = []
    for f in range(folds):
        held = [any(fold_of.get(w) == f for w in s.words) for s in seeds]
        train = [i for i, h in enumerate(held) if not h]
        basic = [i for i, s in enumerate(seeds) if held[i] and s.label not in QUADRANTS]
        pairs = [
            i
            for i, s in enumerate(seeds)
            if s.label in QUADRANTS and all(fold_of.get(w) == f for w in s.words)
        ]
        model = SCMModel.fit(vectors[train], [seeds[i].label for i in train])
        row = {"fold": f, "n_train": len(train), "n_basic": len(basic), "n_pairs": len(pairs)}
        for name, idx in (("basic", basic), ("composition", pairs)):
            row[name] = accuracy(model.score(vectors[idx]), [seeds[i].label for i in idx])
        results.append(row)
    summary = {
        name: {
            "mean": float(np.nanmean([r[name] for r in results])),
            "std": float(np.nanstd([r[name] for r in results])),
        }
        for name in ("basic", "composition")
    }
    return {"folds": results, **summary}
