"""Stigma probe prompts: Social Distance Scale (Mei et al. 2023) and AQ-27 (Mina et al. 2024).

``scd generate stigma --out DIR`` writes three tables and a manifest:

- ``sds.parquet``: the 4 statement templates x 7 Social Distance Scale items for every form
  (sub-condition) of the 93 stigmatized and 29 non-stigmatized conditions, then the baseline
  statements with a bare "someone" (``baseline`` true, no condition);
- ``sentiment.parquet``: "They are / These are people who ..." per form, plus the two baselines;
- ``aq27.parquet``: the 27 AQ-27 items x noun phrases x mental and physical illnesses. Rows of
  one item and noun phrase share a ``frame_id`` (the sentence with ``<mask>`` unfilled).

Templates and word lists are data (``data/stigma_sds.yaml``, ``data/stigma_aq27.yaml``); ids
are short hashes of the row's content, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from scd import __version__
from scd.config.vocabulary import STIGMA_TABLES
from scd.data_gen import content_id, data_path
from scd.data_gen.card import write_card
from scd.data_gen.stigma_conditions import StigmaCondition, load_stigma_conditions
from scd.errors import InputError
from scd.io import atomic_output_dir, read_parquet, read_yaml, sha256_file, write_json

__all__ = [
    "MASK",
    "Aq27Spec",
    "SdsSpec",
    "aq27_rows",
    "generate_stigma",
    "load_aq27_spec",
    "load_sds_spec",
    "read_stigma_table",
    "sds_rows",
    "sentiment_rows",
]

MASK = "<mask>"
LANGUAGES = {"en": "stigma_aq27.yaml", "es": "stigma_aq27_es.yaml"}  # the packaged AQ-27 probes
NOUN_KINDS = ("name_male", "name_female", "gendered", "neutral")
ILLNESS_TYPES = ("mental", "physical")


def _read_mapping(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping at the top level")
    return data


def _need(data: dict, key: str, path: Path) -> Any:
    if key not in data or not data[key]:
        raise InputError(f"{path}: missing or empty key '{key}'")
    return data[key]


@dataclass(frozen=True)
class SdsSpec:
    """The Social Distance Scale templates: ``templates`` {id: text}, ``items`` [(key, action)],
    ``sentiment`` {id: text}."""

    templates: dict[int, str]
    items: tuple[tuple[str, str], ...]
    sentiment: dict[int, str]


@dataclass(frozen=True)
class Aq27Spec:
    """The AQ-27 items (item, dimension, reverse, text), noun phrases and illnesses."""

    dimensions: tuple[str, ...]
    items: tuple[tuple[int, str, bool, str], ...]
    noun_phrases: dict[str, tuple[str, ...]]
    illnesses: dict[str, tuple[str, ...]]
    language: str = "en"
    relative_clauses: tuple[str, ...] = ("who has",)  # what introduces <mask> after the noun
    name_clause: str = "who has"  # a name's non-defining clause: "James, who has <mask>,"


def load_sds_spec(path: Path | None = None) -> SdsSpec:
    """Load and check ``stigma_sds.yaml`` (4 templates, 7 items, 2 sentiment templates)."""
    path = path or data_path("stigma_sds.yaml")
    data = _read_mapping(path)
    templates = {int(t["id"]): str(t["text"]) for t in _need(data, "templates", path)}
    items = tuple((str(i["key"]), str(i["action"])) for i in _need(data, "items", path))
    sentiment = {int(t["id"]): str(t["text"]) for t in _need(data, "sentiment", path)}
    for tid, text in templates.items():
        if text.count(MASK) != 1 or "{action}" not in text:
            raise InputError(f"{path}: template {tid} needs one {MASK} and {{action}}")
    for key, action in items:
        if "{someone}" not in action:
            raise InputError(f"{path}: item '{key}' has no {{someone}} in its action")
    for tid, text in sentiment.items():
        if "{people}" not in text:
            raise InputError(f"{path}: sentiment template {tid} has no {{people}}")
    return SdsSpec(templates, items, sentiment)


def load_aq27_spec(path: Path | None = None, language: str = "en") -> Aq27Spec:
    """Load and check an AQ-27 YAML (items with dimensions, noun phrases, illnesses): ``path``,
    or the packaged one of ``language`` (:data:`LANGUAGES`)."""
    if path is None and language not in LANGUAGES:
        raise InputError(f"expected one of {', '.join(LANGUAGES)}", key="language", value=language)
    path = path or data_path(LANGUAGES[language])
    data = _read_mapping(path)
    dims = tuple(_need(data, "dimensions", path))
    items = []
    for raw in _need(data, "items", path):
        item, dim, text = int(raw["item"]), str(raw["dimension"]), str(raw["text"])
        if dim not in dims:
            raise InputError(f"{path}: item {item} dimension '{dim}' is not one of {dims}")
        if text.count(MASK) != 1 or text.count("[noun phrase]") != 1:
            raise InputError(f"{path}: item {item} needs one [noun phrase] and one {MASK}")
        items.append((item, dim, bool(raw.get("reverse", False)), text))
    nouns = {k: tuple(v) for k, v in _need(data, "noun_phrases", path).items()}
    ills = {k: tuple(v) for k, v in _need(data, "illnesses", path).items()}
    if set(nouns) != set(NOUN_KINDS) or set(ills) != set(ILLNESS_TYPES):
        raise InputError(
            f"{path}: expected noun_phrases {NOUN_KINDS} and illnesses {ILLNESS_TYPES}"
        )
    clauses = tuple(data.get("relative_clauses", ("who has",)))
    return Aq27Spec(
        dims,
        tuple(items),
        nouns,
        ills,
        str(data.get("language", "en")),
        clauses,
        str(data.get("name_clause", clauses[0])),
    )


def _targets(
    conditions: list[StigmaCondition], number: str, people: str
) -> Iterator[tuple[dict[str, Any], str]]:
    """The condition columns of each form's rows and how their prompts name the people
    (``people`` who + the form's ``number`` text: "someone who has HIV"), then the baseline's
    (``people`` alone; no condition)."""
    forms = [(c, j, getattr(f, number)) for c in conditions for j, f in enumerate(c.forms)]
    for c, j, form in [*forms, (None, None, None)]:
        columns = {
            "baseline": c is None,
            "condition": c and c.condition,
            "category": c and c.category,
            "stigmatized": c and c.stigmatized,
            "form_index": j,
            "form": form,
        }
        yield columns, (f"{people} who {form}" if c else people)


def sds_rows(conditions: list[StigmaCondition], spec: SdsSpec) -> list[dict[str, Any]]:
    """SDS statement rows: templates x items x forms, then the baselines (templates x items)."""
    return [
        {
            "prompt_id": content_id("sds", tid, key, columns["condition"], columns["form"]),
            "template": tid,
            "item": n,
            "item_key": key,
            **columns,
            "prompt": template.format(action=action.format(someone=someone)),
        }
        for columns, someone in _targets(conditions, "singular", "someone")
        for tid, template in spec.templates.items()
        for n, (key, action) in enumerate(spec.items, start=1)
    ]


def sentiment_rows(conditions: list[StigmaCondition], spec: SdsSpec) -> list[dict[str, Any]]:
    """Sentiment rows: the two templates per form, then the two baselines ("They are people.")."""
    return [
        {
            "prompt_id": content_id("sentiment", tid, columns["condition"], columns["form"]),
            "template": tid,
            **columns,
            "prompt": template.format(people=people),
        }
        for columns, people in _targets(conditions, "plural", "people")
        for tid, template in spec.sentiment.items()
    ]


_AGREE = re.compile(r"\{([^{}|]*)\|([^{}|]*)\}")  # {masculine|feminine}


def _frame(text: str, noun: str, kind: str, spec: Aq27Spec) -> str:
    """Put a noun phrase in an item: names get a non-defining clause (Mina et al. 2024, Tab. 3),
    and ``{o|a}`` agrees with the noun phrase's grammatical gender (Spanish)."""
    if kind.startswith("name"):
        for clause in spec.relative_clauses:
            rest = text.split(f"{clause} {MASK}", 1)
            if len(rest) == 2:
                more = rest[1].strip() not in ("", ".") and not rest[1].startswith(",")
                text = (
                    f"{rest[0].rstrip()}, {spec.name_clause} {MASK}{',' if more else ''}{rest[1]}"
                )
                break
    feminine = kind == "name_female" or noun.split()[0].lower() in ("una", "la")
    text = _AGREE.sub(lambda m: m.group(2 if feminine else 1), text)
    text = text.replace("[noun phrase]", noun)
    return text[0].upper() + text[1:]


def aq27_rows(spec: Aq27Spec) -> list[dict[str, Any]]:
    """AQ-27 rows: items x noun phrases x illnesses (mental then physical)."""
    rows = []
    for item, dim, reverse, text in spec.items:
        for kind in NOUN_KINDS:
            for noun in spec.noun_phrases[kind]:
                frame = _frame(text, noun, kind, spec)
                frame_id = content_id("aq27", item, noun)
                for itype in ILLNESS_TYPES:
                    for illness in spec.illnesses[itype]:
                        rows.append(
                            {
                                "prompt_id": content_id("aq27", item, noun, illness),
                                "frame_id": frame_id,
                                "item": item,
                                "dimension": dim,
                                "reverse": reverse,
                                "noun_kind": kind,
                                "noun_phrase": noun,
                                "illness": illness,
                                "illness_type": itype,
                                "frame": frame,
                                "prompt": frame.replace(MASK, illness),
                            }
                        )
    return rows


def _subset_conditions(conditions: list[StigmaCondition], n: int | None) -> list[StigmaCondition]:
    if n is None:
        return conditions
    if n < 1:
        raise InputError("expected a positive number", key="limit_conditions", value=n)
    return [
        c for flag in (True, False) for c in [c for c in conditions if c.stigmatized == flag][:n]
    ]


def _subset_aq27(spec: Aq27Spec, n: int | None) -> Aq27Spec:
    if n is None:
        return spec
    cut = lambda d: {k: v[:n] for k, v in d.items()}  # noqa: E731
    return dataclasses.replace(
        spec, noun_phrases=cut(spec.noun_phrases), illnesses=cut(spec.illnesses)
    )


def generate_stigma(
    out: Path | str,
    *,
    limit_conditions: int | None = None,
    conditions_file: Path | str | None = None,
    sds_file: Path | str | None = None,
    aq27_file: Path | str | None = None,
    language: str = "en",
) -> dict[str, Any]:
    """Write ``out/{sds,sentiment,aq27}.parquet`` and ``out/manifest.json`` atomically; in
    another language than English, the AQ-27 table alone (the other probes are English only).

    Args:
        out: The output directory (replaced only on success).
        limit_conditions: Keep only the first N stigmatized and N non-stigmatized conditions,
            and the first N noun phrases of each kind and N illnesses of each type (a small,
            fast subset for smoke runs); all when None.
        conditions_file: Conditions YAML (default: the packaged 93 + 29 conditions).
        sds_file: SDS templates YAML (default: packaged ``stigma_sds.yaml``).
        aq27_file: AQ-27 YAML (default: the packaged one of ``language``).
        language: ``en`` or ``es`` (the Spanish AQ-27 of Mina et al. 2024, Table 3).

    Returns:
        The manifest: row counts per table, counts of conditions and forms, source hashes.
    """
    cpath = Path(conditions_file) if conditions_file else data_path("stigma_conditions.yaml")
    spath = Path(sds_file) if sds_file else data_path("stigma_sds.yaml")
    aq_spec = load_aq27_spec(Path(aq27_file) if aq27_file else None, language)
    conditions = _subset_conditions(load_stigma_conditions(cpath), limit_conditions)
    tables = {"aq27": aq27_rows(_subset_aq27(aq_spec, limit_conditions))}
    if language == "en":
        sds_spec = load_sds_spec(spath)
        tables = {
            "sds": sds_rows(conditions, sds_spec),
            "sentiment": sentiment_rows(conditions, sds_spec),
            **tables,
        }
    apath = Path(aq27_file) if aq27_file else data_path(LANGUAGES[language])
    info = {
        "kind": "stigma_prompts",
        "scd_version": __version__,
        "language": language,
        "limit_conditions": limit_conditions,
        "n_conditions": {
            "stigmatized": sum(c.stigmatized for c in conditions),
            "non_stigmatized": sum(not c.stigmatized for c in conditions),
        },
        "n_forms": sum(len(c.forms) for c in conditions),
        "n_rows": {name: len(rows) for name, rows in tables.items()},
        "sources": {p.name: sha256_file(p) for p in (cpath, spath, apath)},
    }
    with atomic_output_dir(out, "stigma_prompts") as tmp:
        for name, rows in tables.items():
            table = pa.Table.from_pylist(rows).select(list(STIGMA_TABLES[name]))
            pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
        write_json(tmp / "manifest.json", info)
        write_card(tmp, info, [{"kind": "stigma"}])
    return info


def read_stigma_table(directory: Path | str, name: str) -> list[dict[str, Any]]:
    """Rows of ``DIR/<name>.parquet`` from ``scd generate stigma``.

    Raises:
        InputError: the directory, file or a column is missing, or the file is unreadable.
    """
    path = Path(directory) / f"{name}.parquet"
    if not path.is_file():
        raise InputError(
            f"no {name}.parquet (a directory from `scd generate stigma`)",
            key="prompts",
            value=directory,
        )
    return read_parquet(path, STIGMA_TABLES[name]).to_pylist()
