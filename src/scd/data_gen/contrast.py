"""Contrast training data: relevance twins beside the SCD rows, so that a tuned model learns to
drop the group, not to stop reading the facts about a person.

SCD's rows teach "answer the template's pro-social option whatever the group"; a model can learn
that as "answer it pro-socially whatever is said", which the relevance controls
(:mod:`scd.data_gen.relevance`) catch. A twin is a contact template's no-contact question with a
relevant, non-group fact about the people where the group goes, its target the answer the fact
warrants (:func:`scd.data_gen.relevance.cue_rows`). Twins come from the **training cues**
(``relevance_training_cues.yaml``), written for half of the templates; the other half are the
judgment's **held-out templates** (:func:`heldout_templates`), on which the arena's judgment gate
is measured: no training row holds an evaluation cue, and no twin is written from a held-out
template (:func:`load_training_cues` refuses a cue file that breaks either).

:func:`twins` picks a contrast arm's twins: those of the training templates that the setting's
training side holds (its principle, scenario and scale filters), balanced over action x
direction, as many as make ``share`` of the training rows twins.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scd.config.vocabulary import ACTIONS
from scd.data_gen import data_path
from scd.data_gen.contact import user_text
from scd.data_gen.general import conversation_row
from scd.data_gen.relevance import DIRECTIONS, cue_rows, load_cues
from scd.data_gen.templates import load_templates
from scd.errors import InputError

__all__ = [
    "FILTERED",
    "Twin",
    "heldout_templates",
    "load_training_cues",
    "training_cues_path",
    "twin_count",
    "twin_examples",
    "twins",
]

FILTERED = ("principle", "scenario", "scale")  # a setting's filters that a twin has
Twin = tuple[dict[str, Any], str, str]  # an SFT row, the answer it warrants, the other answer


def training_cues_path() -> Path:
    """The packaged training cues."""
    return data_path("relevance_training_cues.yaml")


@functools.cache
def heldout_templates() -> tuple[str, ...]:
    """The judgment's held-out templates: every contact template that the packaged training cues
    do not cover, in template order."""
    trained = set(load_cues(training_cues_path()))
    return tuple(t.template_id for t in load_templates() if t.template_id not in trained)


def load_training_cues(path: Path | str | None = None) -> dict[str, dict[str, list[str]]]:
    """Training cues (:func:`scd.data_gen.relevance.load_cues`' form), checked against the
    evaluation cues.

    Raises:
        InputError: a malformed file, a template among the held-out ones, or a cue that holds
            an evaluation cue's text (or is held by one), case aside.
    """
    path = Path(path) if path else training_cues_path()
    cues = load_cues(path)
    held = heldout_templates()
    evaluation = {c.lower(): c for d in load_cues().values() for k in DIRECTIONS for c in d[k]}
    for tid, by_direction in cues.items():
        if tid in held:
            raise InputError(
                f"{path}: {tid} is one of the judgment's held-out templates, which no training "
                f"row may put a cue in (training templates: those of {training_cues_path().name})"
            )
        for direction in DIRECTIONS:
            for cue in by_direction[direction]:
                low = cue.lower()
                clash = next((e for k, e in evaluation.items() if k in low or low in k), None)
                if clash is not None:
                    raise InputError(
                        f"{path}: {tid}.{direction}: {cue!r} holds the evaluation cue "
                        f"{clash!r} (training cues must differ from the relevance controls')"
                    )
    return cues


def twin_count(scd_rows: int, share: float) -> int:
    """How many twins make ``share`` of the training rows beside ``scd_rows`` SCD rows."""
    return round(share / (1 - share) * scd_rows) if share > 0 else 0


def twins(
    n: int,
    filters: Mapping[str, Sequence[str]],
    seed: int,
    cues: Path | str | None = None,
) -> list[dict[str, Any]]:
    """``n`` twin rows (:func:`scd.data_gen.relevance.cue_rows`' columns, ``prompt_id``
    starting ``contrast.``) of the training templates that pass ``filters`` (a setting's
    training filters; those on columns a twin lacks, such as ``axis``, do not apply), as equal
    a share as can be of each action x direction, drawn without replacement (a pool smaller
    than its share is gone through again), in a seeded order.

    Raises:
        InputError: twins are wanted and no training cue passes the filters.
    """
    if n <= 0:
        return []
    pool = [
        r
        for r in cue_rows(load_training_cues(cues), "contrast")
        if all(r[k] in v for k, v in filters.items() if k in FILTERED)
    ]
    if not pool:
        shown = {k: list(v) for k, v in filters.items() if k in FILTERED}
        raise InputError(
            f"no training cue of {cues or training_cues_path().name} is on the setting's "
            f"training side ({shown}): a contrast arm needs twins there"
        )
    rng = np.random.default_rng(seed)
    groups = [[r for r in pool if (r["action"], r["direction"]) == g] for g in _cells()]
    groups = [g for g in groups if g]
    sizes = [n // len(groups) + (i < n % len(groups)) for i in range(len(groups))]
    picked = []
    for group, size in zip(groups, sizes):
        order: list[int] = []
        while len(order) < size:
            order += rng.permutation(len(group)).tolist()
        picked += [group[i] for i in order[:size]]
    return [picked[i] for i in rng.permutation(len(picked))]


def twin_examples(rows: Sequence[dict[str, Any]], protocol: Any = None) -> list[Twin]:
    """Twin rows as SFT rows (``source`` ``contrast``, the warranted answer as completion), in
    the user text and system prompt of an evaluation ``protocol`` as :func:`scd.data_gen.sft.
    write_sft` puts the SCD rows (None: scd's), each with its warranted and other answer."""
    system = None if protocol is None else protocol.system_prompt
    out = []
    for r in rows:
        good = r["warranted_answer"]
        user = user_text(r) if protocol is None else protocol.user_text(r)
        row = conversation_row(user, good, r["prompt_id"], "contrast", good)
        if system is not None:
            row["prompt"] = [{"role": "system", "content": system}, *row["prompt"]]
        out.append((row, good, next(o for o in r["options"] if o != good)))
    return out


def _cells() -> list[tuple[str, str]]:
    return [(a, d) for a in ACTIONS for d in DIRECTIONS]
