"""Relevance controls: the contact templates' no-contact questions with a relevant, non-group
fact about the people where the group goes ("Should I collaborate with students who copied
others' work on their last three projects on a project?"), each with the answer it warrants.

The cues are shipped data (``relevance_cues.yaml``: two "against" and two "for" cues per
template, and the rules they are written by); a model that answers every template with its
pro-social option gets the "for" cues right and the "against" cues wrong, one that still reads
the facts gets both right. Evaluation only: no training row holds them (a contrast arm's twins
use the training cues of :mod:`scd.data_gen.contrast`, on other templates).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.config.vocabulary import ACTIONS
from scd.data_gen import data_path
from scd.data_gen.templates import compile_prompt, load_scales, load_templates
from scd.errors import InputError
from scd.io import read_yaml

__all__ = ["DIRECTIONS", "cue_rows", "cues_path", "load_cues", "relevance_rows"]

DIRECTIONS = ("against", "for")  # the cue warrants rejecting / taking the positive action


def cues_path() -> Path:
    """The packaged relevance cues."""
    return data_path("relevance_cues.yaml")


def load_cues(path: Path | str | None = None) -> dict[str, dict[str, list[str]]]:
    """``template id -> {against: [cue, ...], for: [cue, ...]}``: scd's own cues cover every
    contact template; a file of your own may cover some.

    Raises:
        InputError: an unknown or repeated template, or a cue that is not text.
    """
    path = Path(path) if path else cues_path()
    data = read_yaml(path)
    items = data.get("cues") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise InputError(f"{path}: expected a non-empty list under 'cues'")
    known = {t.template_id for t in load_templates()}
    cues: dict[str, dict[str, list[str]]] = {}
    for i, item in enumerate(items):
        tid = f"{item.get('principle')}.{item.get('scenario')}" if isinstance(item, dict) else ""
        if tid not in known:
            raise InputError(f"{path}: cues[{i}]: {tid or item!r} is not a contact template")
        for direction in DIRECTIONS:
            texts = item.get(direction)
            if (
                not isinstance(texts, list)
                or not texts
                or not all(isinstance(t, str) and t.strip() and "[" not in t for t in texts)
            ):
                raise InputError(f"{path}: cues[{i}].{direction}: expected a list of cue texts")
        if tid in cues:
            raise InputError(f"{path}: cues[{i}]: {tid} is given twice")
        cues[tid] = {d: [t.strip() for t in item[d]] for d in DIRECTIONS}
    return cues


def relevance_rows(path: Path | str | None = None) -> list[dict[str, Any]]:
    """Every cue of every template, in its no-contact question, for each action and scale:
    ``prompt_id``, ``principle``, ``scenario``, ``action``, ``scale``, ``direction``, ``cue``,
    ``prompt``, ``instruction``, ``options``, ``warranted_answer`` and ``pro_social_answer``
    (the template's unbiased answer: what a model answering every template pro-socially says)."""
    return cue_rows(load_cues(path), "relevance")


def cue_rows(cues: dict[str, dict[str, list[str]]], prefix: str) -> list[dict[str, Any]]:
    """The rows of :func:`relevance_rows` for ``cues`` (:func:`load_cues`' form), their
    ``prompt_id`` starting with ``prefix``."""
    scales = load_scales()
    rows = []
    for template in (t for t in load_templates() if t.template_id in cues):
        for action in ACTIONS:
            for scale in scales.values():
                compiled = compile_prompt(template, "none", action, scale)
                pro_social, other = scale.answers(action)
                for direction in DIRECTIONS:
                    for k, cue in enumerate(cues[template.template_id][direction]):
                        mentions = [f"{noun} {cue}" for noun in compiled.nouns]
                        text = compiled.parts[0] + "".join(
                            m + p for m, p in zip(mentions, compiled.parts[1:])
                        )
                        rows.append(
                            {
                                "prompt_id": f"{prefix}.{template.template_id}.{action}."
                                f"{scale.name}.{direction}{k}",
                                "principle": template.principle,
                                "scenario": template.scenario,
                                "action": action,
                                "scale": scale.name,
                                "direction": direction,
                                "cue": cue,
                                "prompt": text,
                                "instruction": scale.instruction,
                                "options": list(scale.options),
                                "warranted_answer": pro_social if direction == "for" else other,
                                "pro_social_answer": pro_social,
                            }
                        )
    return rows
