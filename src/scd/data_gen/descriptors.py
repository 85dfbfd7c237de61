"""Descriptor lists: HolisticBias (v1.0, v1.1, any file in its format) and the stigma conditions.

A :class:`Descriptor` is what fills a template's group mention ``[descriptor] <noun>``: an adjective
that goes before the noun ("Deaf students") or a phrase that goes after it ("students who use
wheelchairs", "students who have depression").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scd.data_gen import data_path
from scd.data_gen.stigma_conditions import load_stigma_conditions
from scd.errors import InputError
from scd.io import data_dir, read_json, sha256_file

__all__ = [
    "Descriptor",
    "DescriptorSet",
    "HOLISTIC_BIAS_VERSIONS",
    "data_dir",
    "load_holistic_bias",
    "load_stigma_descriptors",
    "resolve_descriptors",
]

HOLISTIC_BIAS_VERSIONS = ("v1.0", "v1.1")
DISPREFERRED = frozenset({"dispreferred", "polarizing"})


@dataclass(frozen=True)
class Descriptor:
    """One descriptor and where it goes relative to the template's noun."""

    axis: str
    bucket: str
    text: str
    position: str = "before"  # "before" the noun (adjective) or "after" it (phrase)
    preference: str | None = None

    def group(self, noun: str) -> str:
        """Render the group mention for ``noun``: "Deaf students", "students who are Deaf"."""
        if not self.text:  # the descriptor-free baseline
            return noun
        return f"{self.text} {noun}" if self.position == "before" else f"{noun} {self.text}"


@dataclass
class DescriptorSet:
    """Descriptors ready for generation, with where they came from (for the manifest)."""

    descriptors: list[Descriptor]
    source: dict[str, Any]
    dropped_duplicates: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _holistic_bias_entries(path: Path, drop_dispreferred: bool) -> list[Descriptor]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected an object axis -> bucket -> list of descriptors")
    out: list[Descriptor] = []
    for axis, buckets in data.items():
        if not isinstance(buckets, dict):
            raise InputError(f"{path}: axis '{axis}' must map buckets to lists of descriptors")
        for bucket, entries in buckets.items():
            if not isinstance(entries, list):
                raise InputError(f"{path}: {axis}.{bucket} must be a list of descriptors")
            for i, entry in enumerate(entries):
                if isinstance(entry, str):
                    entry = {"descriptor": entry}
                if not isinstance(entry, dict) or not isinstance(entry.get("descriptor"), str):
                    raise InputError(
                        f"{path}: {axis}.{bucket}[{i}] must be a string or an object with a "
                        "string 'descriptor'"
                    )
                text, preference = entry["descriptor"].strip(), entry.get("preference")
                if not text:
                    raise InputError(f"{path}: {axis}.{bucket}[{i}] is an empty descriptor")
                if drop_dispreferred and preference in DISPREFERRED:
                    continue
                out.append(Descriptor(axis, bucket, text, "before", preference))
    return out


def _noun_phrase_entries(
    path: Path, drop_dispreferred: bool, skipped: list[str]
) -> list[Descriptor]:
    """Turn ``standalone_noun_phrases.json`` entries into phrases placed after the noun."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected an object axis -> list of noun phrases")
    out: list[Descriptor] = []
    for axis, entries in data.items():
        if not isinstance(entries, list):
            raise InputError(f"{path}: axis '{axis}' must be a list of noun phrases")
        for i, entry in enumerate(entries):
            if isinstance(entry, str):
                entry = {"noun_phrase": entry}
            if not isinstance(entry, dict) or not isinstance(entry.get("noun_phrase"), str):
                raise InputError(f"{path}: {axis}[{i}] must have a string 'noun_phrase'")
            if drop_dispreferred and entry.get("preference") in DISPREFERRED:
                continue
            plural = entry.get("plural_noun_phrase") or entry["noun_phrase"]
            if "{noun}" in plural:
                text = plural.replace("{article} ", "").replace("{noun}", "").strip()
            elif entry.get("plural_noun_phrase"):
                text = (
                    f"who are {plural.strip()}"  # "wheelchair users" -> "who are wheelchair users"
                )
            else:  # a singular phrase without a noun slot has no plural to place after a noun
                skipped.append(entry["noun_phrase"])
                continue
            if not text:
                raise InputError(f"{path}: {axis}[{i}] has nothing besides the noun")
            out.append(Descriptor(axis, "noun_phrase", text, "after", entry.get("preference")))
    return out


def _dedupe(descriptors: list[Descriptor]) -> tuple[list[Descriptor], list[str]]:
    """Keep the first occurrence of each descriptor text (some sit in two axes, e.g. "queer")."""
    seen: set[str] = set()
    kept, dropped = [], []
    for d in descriptors:
        if d.text in seen:
            dropped.append(f"{d.axis}/{d.bucket}/{d.text}")
        else:
            seen.add(d.text)
            kept.append(d)
    return kept, dropped


def load_holistic_bias(
    path: Path | str,
    *,
    drop_dispreferred: bool = False,
    noun_phrases: Path | str | None = None,
) -> DescriptorSet:
    """Load a ``descriptors.json`` in HolisticBias format (axis -> bucket -> descriptors).

    Args:
        path: the descriptors file.
        drop_dispreferred: drop entries marked ``dispreferred`` or ``polarizing``.
        noun_phrases: optional ``standalone_noun_phrases.json``; its phrases go after the noun.

    Returns:
        The descriptors, duplicates across axes removed (first occurrence kept).

    Raises:
        InputError: malformed file or no descriptors at all.
    """
    path = Path(path)
    entries = _holistic_bias_entries(path, drop_dispreferred)
    skipped: list[str] = []
    source: dict[str, Any] = {
        "kind": "holistic_bias_format",
        "path": str(path),
        "sha256": sha256_file(path),
        "drop_dispreferred": drop_dispreferred,
    }
    if noun_phrases is not None:
        noun_phrases = Path(noun_phrases)
        entries += _noun_phrase_entries(noun_phrases, drop_dispreferred, skipped)
        source["noun_phrases"] = {"path": str(noun_phrases), "sha256": sha256_file(noun_phrases)}
    if not entries:
        raise InputError(f"{path}: no descriptors (expected axis -> bucket -> list of descriptors)")
    kept, dropped = _dedupe(entries)
    return DescriptorSet(kept, source, dropped, skipped)


def load_stigma_descriptors() -> DescriptorSet:
    """The 93 stigmatized and 29 non-stigmatized conditions (Mei et al. 2023), forms expanded.

    Axis = the paper's category, bucket = the condition ("Latina/Latino"), text = the phrase after
    the noun ("who are Latinas", "who have depression").
    """
    preference = {True: "stigmatized", False: "non_stigmatized"}
    entries = [
        Descriptor(c.category, c.condition, f"who {f.plural}", "after", preference[c.stigmatized])
        for c in load_stigma_conditions()
        for f in c.forms
    ]
    kept, dropped = _dedupe(entries)
    packaged = data_path("stigma_conditions.yaml")
    source = {"kind": "stigma", "path": packaged.name, "sha256": sha256_file(packaged)}
    return DescriptorSet(kept, source, dropped)


def _fetch(version: str, file: str) -> Path:
    """The local path of a HolisticBias file, fetched and verified if missing
    (:func:`scd.reference_data.ensure`: ``$SCD_DATA_DIR/holistic_bias/<version>/<file>``)."""
    from scd.reference_data import ensure

    return ensure("holistic_bias", [f"{version}/{file}"]) / version / file


def resolve_descriptors(
    spec: str,
    *,
    version: str = "v1.0",
    drop_dispreferred: bool = False,
    noun_phrases: bool = False,
) -> DescriptorSet:
    """Resolve ``--descriptors``: ``holistic_bias``, ``stigma``, ``toy`` or a descriptors file.

    ``holistic_bias`` reads ``$SCD_DATA_DIR/holistic_bias/<version>/descriptors.json`` (default
    ``~/.cache/scd``) and downloads it from the dataset's public repository when missing. With
    ``noun_phrases`` the ``standalone_noun_phrases.json`` beside the descriptors file is added.
    """
    if spec == "stigma":
        return load_stigma_descriptors()
    if spec == "toy":  # the small packaged list of the toy model and the quickstart
        toy = data_path("toy_descriptors.json")
        result = load_holistic_bias(toy, drop_dispreferred=drop_dispreferred)
        result.source.update(kind="toy", path=toy.name)
        return result
    if spec == "holistic_bias":
        if version not in HOLISTIC_BIAS_VERSIONS:
            raise InputError(
                f"expected one of {', '.join(HOLISTIC_BIAS_VERSIONS)}",
                key="hb_version",
                value=version,
            )
        path = _fetch(version, "descriptors.json")
        phrases = _fetch(version, "standalone_noun_phrases.json") if noun_phrases else None
        result = load_holistic_bias(path, drop_dispreferred=drop_dispreferred, noun_phrases=phrases)
        result.source.update(kind="holistic_bias", version=version)
        return result
    path = Path(spec)
    if not path.is_file():
        if path.suffix or "/" in spec or path.exists():
            kind = "a directory, not a file" if path.is_dir() else "no such file"
            raise InputError(
                f"{kind} (a descriptors.json is expected)", key="descriptors", value=spec
            )
        raise InputError(
            "expected holistic_bias, stigma, toy or a descriptors.json file",
            key="descriptors",
            value=spec,
        )
    phrases = path.with_name("standalone_noun_phrases.json") if noun_phrases else None
    if phrases is not None and not phrases.is_file():
        raise InputError(f"{phrases} not found beside {path}", key="noun_phrases")
    return load_holistic_bias(path, drop_dispreferred=drop_dispreferred, noun_phrases=phrases)
