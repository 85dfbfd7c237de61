"""Contact templates and prompt scales: loaded from data files, validated, compiled for rendering.

A template (principle x scenario) has three contact variants (none, positive, negative); each has
a preface and a verb phrase per action (positive, negative). A scale turns the verb phrase into a
question. :func:`compile_prompt` splits a rendered prompt into literal text and group mentions so
that filling in hundreds of descriptors is a string join.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from scd.config.vocabulary import ACTIONS, CONTACTS, PRINCIPLES, SCALES, SCENARIOS
from scd.data_gen import data_path
from scd.errors import InputError
from scd.io import read_yaml

__all__ = [
    "ACTIONS",
    "CONTACTS",
    "PRINCIPLES",
    "SCALES",
    "SCENARIOS",
    "CompiledPrompt",
    "Scale",
    "Template",
    "Variant",
    "compile_prompt",
    "load_scales",
    "load_templates",
    "templates_path",
    "scales_path",
]

_CONTACT_KEYS = {"none": "none", "positive": "positive_contact", "negative": "negative_contact"}
# a group mention "[descriptor] <noun>"; a stray "[descriptor]" or "<noun>" is an error
MENTION = re.compile(r"\[descriptor\] <([^<>]+)>")


def templates_path() -> Path:
    """The packaged contact templates file."""
    return data_path("contact_templates.yaml")


def scales_path() -> Path:
    """The packaged prompt scales file."""
    return data_path("scales.yaml")


@dataclass(frozen=True)
class Scale:
    """A prompt scale: question pattern with ``{vp}``, its two options and answer instruction."""

    name: str
    question: str
    options: tuple[str, str]
    instruction: str

    def answers(self, action: str) -> tuple[str, str]:
        """Return (unbiased, biased) answers for a positive or negative action."""
        agree, reject = self.options
        return (agree, reject) if action == "positive" else (reject, agree)


@dataclass(frozen=True)
class Variant:
    """One contact variant: preface (maybe empty) and the verb phrase per action."""

    contact: str
    preface: str
    positive: str
    negative: str


@dataclass(frozen=True)
class Template:
    """One principle x scenario template with its three contact variants."""

    principle: str
    scenario: str
    variants: dict[str, Variant]

    @property
    def template_id(self) -> str:
        return f"{self.principle}.{self.scenario}"


@dataclass(frozen=True)
class CompiledPrompt:
    """A prompt split around its group mentions: ``parts[0] g(nouns[0]) parts[1] ...``."""

    parts: tuple[str, ...]
    nouns: tuple[str, ...]


def _check_mentions(path: Path, where: str, text: str) -> None:
    rest = MENTION.sub("", text)
    if "[descriptor]" in rest or "<" in rest or ">" in rest:
        raise InputError(
            f"{path}: {where}: every '[descriptor]' must be followed by its marked noun, "
            "as in '[descriptor] <students>'"
        )


def load_scales(path: Path | str | None = None) -> dict[str, Scale]:
    """Load and validate the prompt scales (certainty, likelihood, frequency)."""
    path = Path(path) if path else scales_path()
    data = read_yaml(path)
    if not isinstance(data, dict) or not data:
        raise InputError(f"{path}: expected a mapping scale name -> question, options, instruction")
    scales = {}
    for name, spec in data.items():
        if not isinstance(spec, dict) or set(spec) != {"question", "options", "instruction"}:
            raise InputError(
                f"{path}: {name}: expected exactly keys question, options, instruction"
            )
        if "{vp}" not in str(spec["question"]):
            raise InputError(f"{path}: {name}.question must contain the placeholder {{vp}}")
        opts = spec["options"]
        if not (
            isinstance(opts, list) and len(opts) == 2 and all(isinstance(o, str) for o in opts)
        ):
            raise InputError(f"{path}: {name}.options must be a list of two strings")
        scales[name] = Scale(name, spec["question"], (opts[0], opts[1]), str(spec["instruction"]))
    return scales


def load_templates(path: Path | str | None = None) -> list[Template]:
    """Load and validate the contact templates (defaults to the packaged Table 2 templates).

    Raises:
        InputError: unknown principle/scenario, missing variant or verb phrase, a variant whose
            prompts never mention the group, malformed markup, or duplicate templates.
    """
    path = Path(path) if path else templates_path()
    data = read_yaml(path)
    items = data.get("templates") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise InputError(f"{path}: expected a non-empty list under 'templates'")
    templates, seen = [], set()
    for i, item in enumerate(items):
        where = f"templates[{i}]"
        if not isinstance(item, dict):
            raise InputError(f"{path}: {where} must be a mapping")
        principle, scenario = item.get("principle"), item.get("scenario")
        if principle not in PRINCIPLES:
            raise InputError(f"{path}: {where}.principle '{principle}' is not one of {PRINCIPLES}")
        if scenario not in SCENARIOS:
            raise InputError(f"{path}: {where}.scenario '{scenario}' is not one of {SCENARIOS}")
        if (principle, scenario) in seen:
            raise InputError(f"{path}: {where}: duplicate template {principle}.{scenario}")
        seen.add((principle, scenario))
        extra = set(item) - {"principle", "scenario", *_CONTACT_KEYS.values()}
        if extra:
            raise InputError(f"{path}: {where}: unknown keys {sorted(extra)}")
        base = item.get("none")
        if not isinstance(base, dict) or not base.get("positive") or not base.get("negative"):
            raise InputError(f"{path}: {where}.none needs verb phrases 'positive' and 'negative'")
        variants = {}
        for contact, key in _CONTACT_KEYS.items():
            spec = item.get(key)
            if not isinstance(spec, dict):
                raise InputError(f"{path}: {where}.{key} is missing (a mapping is expected)")
            unknown = set(spec) - {"preface", "positive", "negative"}
            if unknown:
                raise InputError(f"{path}: {where}.{key}: unknown keys {sorted(unknown)}")
            preface = str(spec.get("preface") or "").strip()
            if contact == "none" and preface:
                raise InputError(f"{path}: {where}.none must not have a preface")
            if contact != "none" and not preface:
                raise InputError(f"{path}: {where}.{key}.preface is missing")
            phrases = {a: str(spec.get(a) or base[a]).strip() for a in ACTIONS}
            var = Variant(contact, preface, **phrases)
            for action in ACTIONS:
                _check_mentions(path, f"{where}.{key}", f"{var.preface} {getattr(var, action)}")
            # the contact preface is about the group; the no-contact question names it
            for part in ("preface",) if preface else ACTIONS:
                if not MENTION.search(getattr(var, part)):
                    raise InputError(
                        f"{path}: {where}.{key}.{part} never mentions the group: "
                        "a '[descriptor] <noun>' placeholder is expected"
                    )
            variants[contact] = var
        templates.append(Template(principle, scenario, variants))
    return templates


def _question(variant: Variant, action: str, scale: Scale) -> str:
    question = scale.question.format(vp=getattr(variant, action))
    if not variant.preface:
        return question
    if variant.preface.endswith(","):  # "Having ..., should I ...?"
        return f"{variant.preface} {question[0].lower()}{question[1:]}"
    return f"{variant.preface} {question}"


def compile_prompt(template: Template, contact: str, action: str, scale: Scale) -> CompiledPrompt:
    """Split one prompt of a template into literal parts and the nouns of its group mentions."""
    text = _question(template.variants[contact], action, scale)
    pieces = MENTION.split(text)  # [literal, noun, literal, noun, ..., literal]
    return CompiledPrompt(tuple(pieces[0::2]), tuple(pieces[1::2]))
