"""Generate the contact-hypothesis prompt sets and write ``prompts.parquet`` + ``manifest.json``.

Prompt sets = principles x scenarios x actions x scales x descriptors; each set holds a no-contact,
a positive-contact and a negative-contact prompt. Rows are ordered set by set and carry stable ids
derived from their content, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from scd import __version__
from scd.config.vocabulary import COUNT_COLUMNS, PROMPT_COLUMNS
from scd.data_gen import content_id
from scd.data_gen.card import write_card
from scd.data_gen.descriptors import Descriptor, DescriptorSet
from scd.data_gen.templates import (
    ACTIONS,
    CONTACTS,
    Scale,
    Template,
    compile_prompt,
    load_scales,
    load_templates,
    scales_path,
    templates_path,
)
from scd.errors import InputError
from scd.io import atomic_output_dir, read_parquet, sha256_file, write_json

__all__ = [
    "BASELINE_AXIS",
    "COLUMNS",
    "COUNT_COLUMNS",
    "baseline_descriptors",
    "generate_contact_table",
    "read_baseline",
    "read_prompts",
    "user_text",
    "write_prompts",
]

BASELINE_AXIS = "baseline"

COLUMNS = PROMPT_COLUMNS  # prompts.parquet, defined in scd.config.vocabulary


def generate_contact_table(
    descriptors: DescriptorSet,
    templates: Sequence[Template] | None = None,
    scales: dict[str, Scale] | None = None,
) -> pa.Table:
    """Build every prompt row in memory as an Arrow table (see :data:`COLUMNS`).

    Rows are ordered template, action, scale, descriptor, contact (each set's three prompts
    adjacent). Strings are assembled by Arrow kernels, one compiled prompt x all descriptors at
    a time, then put in row order with one ``take``.
    """
    templates = list(templates) if templates is not None else load_templates()
    scales = scales if scales is not None else load_scales()
    descs = descriptors.descriptors
    n_d, n_c = len(descs), len(CONTACTS)
    blocks = [(t, a, s) for t in templates for a in ACTIONS for s in scales]  # one per set row

    @functools.cache
    def groups(noun: str) -> pa.Array:
        return pa.array([d.group(noun) for d in descs], pa.string())

    chunks = []  # order: block, contact, descriptor
    for t, a, s in blocks:
        for contact in CONTACTS:
            comp = compile_prompt(t, contact, a, scales[s])
            pieces: list = [comp.parts[0]]
            for noun, part in zip(comp.nouns, comp.parts[1:]):
                pieces += [groups(noun), part]
            pieces = [p for p in pieces if not (isinstance(p, str) and p == "")]
            chunks.append(pc.binary_join_element_wise(*pieces, ""))
    # row r = (block, descriptor, contact) <- chunk index (block, contact) at offset descriptor
    b, d, c = np.indices((len(blocks), n_d, n_c)).reshape(3, -1)
    prompt = pa.concat_arrays(chunks).take(pa.array((b * n_c + c) * n_d + d))

    set_ids = pa.array(
        [content_id(t.template_id, a, s, x.text) for t, a, s in blocks for x in descs], pa.string()
    )  # order: block, descriptor
    set_col = set_ids.take(pa.array(b * n_d + d))
    contact_col = _dict(list(CONTACTS), c)
    prompt_id = pc.binary_join_element_wise(set_col, contact_col.cast(pa.string()), "-")

    per_block = {  # the same value for every row of a block
        "principle": [t.principle for t, _, _ in blocks],
        "scenario": [t.scenario for t, _, _ in blocks],
        "action": [a for _, a, _ in blocks],
        "scale": [s for _, _, s in blocks],
        "unbiased_answer": [scales[s].answers(a)[0] for _, a, s in blocks],
        "biased_answer": [scales[s].answers(a)[1] for _, a, s in blocks],
        "instruction": [scales[s].instruction for _, _, s in blocks],
    }
    options = pa.array([list(scales[s].options) for _, _, s in blocks], pa.list_(pa.string()))
    columns = {
        **{name: _dict_from(values, b) for name, values in per_block.items()},
        "set_id": set_col,
        "prompt_id": prompt_id,
        "contact": contact_col,
        "axis": _dict_from([x.axis for x in descs], d),
        "bucket": _dict_from([x.bucket for x in descs], d),
        "descriptor": pa.array([x.text for x in descs], pa.string()).take(pa.array(d)),
        "prompt": prompt,
        "options": options.take(pa.array(b)),
    }
    return pa.table({name: columns[name] for name in COLUMNS})


def _dict(names: list[str], indices: np.ndarray) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(indices.astype(np.int32)), pa.array(names, pa.string())
    )


def _dict_from(values: list[str], index: np.ndarray) -> pa.DictionaryArray:
    """Dictionary column whose row i holds ``values[index[i]]``."""
    names = sorted(set(values))
    code = {name: i for i, name in enumerate(names)}
    return _dict(names, np.array([code[v] for v in values], dtype=np.int32)[index])


def baseline_descriptors() -> DescriptorSet:
    """The descriptor-free baseline: every template with its bare noun ("Should I collaborate
    with students on a project?"). Beyond the paper: it shows a model's general answer tendency.
    """
    return DescriptorSet([Descriptor(BASELINE_AXIS, BASELINE_AXIS, "")], {"kind": "baseline"})


def _counts(table: pa.Table) -> dict[str, dict[str, int]]:
    counts = {}
    for col in COUNT_COLUMNS:
        vc = pc.value_counts(table[col].combine_chunks().cast(pa.string())).to_pylist()
        counts[col] = {v["values"]: v["counts"] for v in sorted(vc, key=lambda v: v["values"])}
    return counts


def manifest(table: pa.Table, descriptors: DescriptorSet, **extra: Any) -> dict[str, Any]:
    """What a prompts directory holds and where it came from."""
    return {
        "kind": "contact_prompts",
        "scd_version": __version__,
        "n_descriptors": len(descriptors.descriptors),
        "n_sets": len(pc.unique(table["set_id"])),
        "n_prompts": table.num_rows,
        "counts": _counts(table),
        "descriptors": descriptors.source,
        "dropped_duplicate_descriptors": descriptors.dropped_duplicates,
        "skipped_noun_phrases": descriptors.skipped,
        **extra,
    }


def write_prompts(
    out: Path | str,
    descriptors: DescriptorSet,
    *,
    templates_file: Path | str | None = None,
    scales_file: Path | str | None = None,
) -> dict[str, Any]:
    """Generate and atomically write ``out/prompts.parquet``, ``out/baseline.parquet`` (the
    descriptor-free baseline prompts) and ``out/manifest.json``.

    Returns:
        The manifest that was written.
    """
    tpath = Path(templates_file) if templates_file else templates_path()
    spath = Path(scales_file) if scales_file else scales_path()
    templates, scales = load_templates(tpath), load_scales(spath)
    table = generate_contact_table(descriptors, templates, scales)
    info = manifest(
        table,
        descriptors,
        templates={"path": tpath.name, "sha256": sha256_file(tpath)},
        scales={"path": spath.name, "sha256": sha256_file(spath)},
    )
    baseline = generate_contact_table(baseline_descriptors(), templates, scales)
    with atomic_output_dir(out, "contact_prompts") as tmp:
        pq.write_table(table, tmp / "prompts.parquet", compression="zstd")
        pq.write_table(baseline, tmp / "baseline.parquet", compression="zstd")
        write_json(tmp / "manifest.json", info)
        write_card(tmp, info, [info["descriptors"]])
    return info


def user_text(row: dict[str, Any]) -> str:
    """The user message of a prompt row, as scored and trained: the prompt, then its answer
    instruction."""
    return f"{row['prompt']} {row['instruction']}"


def read_prompts(directory: Path | str) -> pa.Table:
    """Read ``DIR/prompts.parquet`` (the output of ``scd generate contact``)."""
    path = Path(directory) / "prompts.parquet"
    if not Path(directory).is_dir():
        raise InputError("no such directory", key="prompts", value=directory)
    if not path.is_file():
        raise InputError(
            "no prompts.parquet (run `scd generate contact`)", key="prompts", value=directory
        )
    return read_parquet(path, COLUMNS)


def read_baseline(directory: Path | str) -> pa.Table | None:
    """Read ``DIR/baseline.parquet`` if the prompt directory has one."""
    path = Path(directory) / "baseline.parquet"
    return pq.read_table(path) if path.is_file() else None
