"""WinoBias' sentences (Zhao et al. 2018), as :mod:`scd.eval.benchmarks.winobias` asks them: the
``wino/data`` files of github.com/uclanlp/corefBias (``{pro,anti}_stereotyped_type{1,2}
.txt.{dev,test}``, ``male_occupations.txt``, ``female_occupations.txt``; ``--data``: their
directory), each sentence with its two occupations and the one its pronoun refers to.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from scd.errors import InputError

__all__ = ["KINDS", "OCCUPATIONS", "TYPES", "load_sentences", "question", "sentence_files"]

KINDS = ("pro", "anti")
TYPES = ("type1", "type2")
OCCUPATIONS = ("male_occupations.txt", "female_occupations.txt")


def sentence_files(data: str, split: str) -> dict[tuple[str, str], Path]:
    """The sentence files of ``split`` by (kind, type)."""
    root = Path(data).expanduser()
    return {(k, t): root / f"{k}_stereotyped_{t}.txt.{split}" for t in TYPES for k in KINDS}


def _lines(path: Path) -> list[str]:
    try:
        return [x.strip() for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    except OSError as err:
        text = f"cannot read ({err.strerror or err})"
        raise InputError(text, key="data", value=str(path)) from None


def _mentions(text: str, occupations: list[str]) -> list[str]:
    """The occupations ``text`` names, in the order they first appear."""
    found: list[tuple[int, int, str]] = []
    low = text.lower()
    for occ in sorted(occupations, key=len, reverse=True):  # "construction worker" first
        for m in re.finditer(r"\b" + re.escape(occ.lower()) + r"\b", low):
            if not any(a <= m.start() and m.end() <= b for a, b, _ in found):
                found.append((m.start(), m.end(), occ))
    return list(dict.fromkeys(o for _, _, o in sorted(found)))


def load_sentences(data: str, split: str = "test") -> list[dict[str, Any]]:
    """The WinoBias sentences of ``split``: ``id``, ``pair`` (the id its pro and anti versions
    share), ``type``, ``kind`` (pro or anti), ``sentence`` (brackets removed), ``pronoun`` (the
    first one asked about), ``options`` (the two occupations, as they first appear) and
    ``answer`` (the one the pronoun refers to). A sentence is asked about the first two
    occupations of the lists it names; one that names fewer, or whose referent is not among
    those two, is left out (none in either split: the dev pair that names a third occupation,
    "... reported her to the manager", has its referent among the first two).

    Raises:
        InputError: a file missing, or a line not in WinoBias' format.
    """
    root = Path(data).expanduser()
    occupations = [o for f in OCCUPATIONS for o in _lines(root / f)]
    out = []
    for (kind, typ), path in sentence_files(data, split).items():
        for line in _lines(path):
            index, _, text = line.partition(" ")
            spans = re.findall(r"\[([^\]]+)\]", text)
            if not index.isdigit() or len(spans) < 2:
                raise InputError(
                    f"{path.name}: {line[:60]!r} is not an index and a sentence with bracketed "
                    "spans",
                    key="data",
                    value=str(root),
                )
            answer = re.sub(r"^(the|a|an)\s+", "", spans[0], flags=re.IGNORECASE).strip()
            sentence = re.sub(r"[\[\]]", "", text)
            options = _mentions(sentence, occupations)[:2]
            if answer.lower() not in [o.lower() for o in options] or len(options) != 2:
                continue
            out.append(
                {
                    "id": f"{typ}-{kind}-{index}",
                    "pair": f"{typ}-{index}",
                    "type": typ,
                    "kind": kind,
                    "sentence": sentence,
                    "pronoun": spans[1],
                    "options": options,
                    "answer": next(o for o in options if o.lower() == answer.lower()),
                }
            )
    return out


def question(row: dict[str, Any]) -> str:
    """The user turn: the sentence and the question about its pronoun."""
    a, b = row["options"]
    return (
        f'{row["sentence"]}\nIn the sentence above, who does "{row["pronoun"]}" refer to: the '
        f"{a} or the {b}? Answer with the occupation."
    )
