"""Dataset cards: every ``scd generate`` output directory is a Hub-ready dataset.

``README.md`` opens with the YAML front matter the Hub (and ``datasets.load_dataset(DIR)``)
reads -- one config per Parquet file, the first the default -- then says what the files hold,
their row counts and schema, where the descriptors came from and under which license, and how
the data was generated. :func:`push_to_hub` uploads such a directory (``--push-to-hub REPO``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from scd.io import read_manifest

__all__ = ["CARD", "card_text", "descriptor_sources", "push_to_hub", "write_card"]

CARD = "README.md"
# kind -> (title, what it is, [(config, {split: file})])
LAYOUTS: dict[str, tuple[str, str, list[tuple[str, dict[str, str]]]]] = {
    "contact_prompts": (
        "SCD contact prompts",
        "The contact-hypothesis prompt sets of the SCD paper (Raj et al. 2024, Social Contact "
        "Debiasing): 6 principles x 5 scenarios x 2 actions x 3 scales per descriptor, each set "
        "with no, positive and negative contact; `baseline` holds the same templates with no "
        "descriptor.",
        [("prompts", {"test": "prompts.parquet"}), ("baseline", {"test": "baseline.parquet"})],
    ),
    "stigma_prompts": (
        "SCD stigma probes",
        "Stigma probes of health conditions: the Social Distance Scale and sentiment prompts of "
        "Mei et al. (2023) and the AQ-27 items of Mina et al. (2024).",
        [(name, {"test": f"{name}.parquet"}) for name in ("sds", "sentiment", "aq27")],
    ),
    "sft": (
        "SCD instruction-tuning data",
        "Instruction-tuning rows of one SCD transfer setting (prompt/completion conversations "
        "that answer with the unbiased option), and the held-out prompts the tuned model is "
        "evaluated on.",
        [
            ("sft", {"train": "train.parquet", "validation": "eval.parquet"}),
            ("heldout", {"test": "heldout/prompts.parquet"}),
            ("heldout_baseline", {"test": "heldout/baseline.parquet"}),
        ],
    ),
}
COMMANDS = {"contact_prompts": "contact", "stigma_prompts": "stigma", "sft": "sft"}


LICENSES = {  # descriptor source kind -> (Hub license id, where the text comes from)
    "toy": ("mit", "scd's packaged toy descriptors (MIT, as scd)."),
    "holistic_bias": (
        "cc-by-sa-4.0",
        "Descriptors from HolisticBias (Smith et al. 2022, "
        "github.com/facebookresearch/ResponsibleNLP), CC BY-SA 4.0.",
    ),
    "stigma": (
        "other",
        "Conditions and probe texts written by scd from the papers (Mei et al. "
        "2023; the AQ-27 of Corrigan et al. 2003 as used by Mina et al. 2024): scd's files "
        "are MIT; cite the papers, and the AQ-27's own terms apply to its items.",
    ),
}


def _license(sources: list[dict[str, Any]], general: str | None) -> tuple[str, str]:
    """(Hub license id, the sentences that explain it) for these descriptor sources."""
    unknown = ("other", "Descriptors from a user-supplied file: its own license applies.")
    found = dict.fromkeys(LICENSES.get(s.get("kind"), unknown) for s in sources)
    if general:
        found[("other", f"The general instruction rows: the license of `{general}`.")] = None
    ids = {i for i, _ in found}
    text = " ".join(t for _, t in found)
    if len(ids) == 1:
        return ids.pop(), text
    return ("cc-by-sa-4.0" if ids == {"mit", "cc-by-sa-4.0"} else "other"), text  # share-alike


def descriptor_sources(prompt_dirs: list[Path | str | None]) -> list[dict[str, Any]]:
    """The descriptor sources that the manifests of these prompt directories record."""
    return [read_manifest(d).get("descriptors") or {} for d in prompt_dirs if d]


def _size_category(n: int) -> str:
    for limit, name in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
    ):
        if n < limit:
            return name
    return "n>10M"


def card_text(directory: Path, info: dict[str, Any], sources: list[dict[str, Any]]) -> str:
    """The dataset card of an output directory of ``scd generate`` (its manifest ``info``)."""
    kind = info["kind"]
    title, what, layout = LAYOUTS[kind]
    configs, counts, schemas, first = [], [], [], None
    for name, splits in layout:
        present = {s: f for s, f in splits.items() if (directory / f).is_file()}
        if not present:
            continue
        config = {"config_name": name, **({} if configs else {"default": True})}
        config["data_files"] = [{"split": s, "path": f} for s, f in present.items()]
        configs.append(config)
        for split, file in present.items():
            counts.append((name, split, file, pq.read_metadata(directory / file).num_rows))
        schema = pq.read_schema(directory / next(iter(present.values())))
        schemas += [f"### `{name}`", ""]
        if configs[1:] and schema == first:
            schemas += [f"The columns of `{configs[0]['config_name']}`.", ""]
            continue
        first = first or schema
        schemas += ["| column | type |", "|---|---|"]
        for f in schema:
            shown = (
                f"{f.type.value_type} (dictionary-encoded)"
                if pa.types.is_dictionary(f.type)
                else f.type
            )
            schemas.append(f"| {f.name} | {shown} |")
        schemas.append("")
    general = info.get("general") or {}
    general_source = general.get("source") if general.get("rows") else None
    license_id, license_text = _license(sources, general_source)
    front = {
        "license": license_id,
        "pretty_name": title,
        "tags": ["bias", "fairness", "social-contact-debiasing", "scd"],
        "size_categories": [_size_category(sum(c[3] for c in counts))],
        "configs": configs,
    }
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).rstrip(),
        "---",
        "",
        f"# {title}",
        "",
        what,
        "",
        f"Generated by scd {info['scd_version']} with `scd generate "
        f"{COMMANDS[kind]}`; `manifest.json` records every input and its sha256.",
        "",
        "## Files",
        "",
        "| config | split | file | rows |",
        "|---|---|---|---:|",
        *(f"| {c} | {s} | `{f}` | {n:,} |" for c, s, f, n in counts),
        "",
        "## Schema",
        "",
        *schemas,
        "## License",
        "",
        license_text,
        "",
        "## Loading",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'ds = load_dataset("path/to/this/directory")  # the `{configs[0]["config_name"]}` '
        "config; name another as the second argument",
        "```",
        "",
    ]
    return "\n".join(lines)


def write_card(directory: Path, info: dict[str, Any], sources: list[dict[str, Any]]) -> None:
    """Write ``directory/README.md`` (see :func:`card_text`)."""
    (directory / CARD).write_text(card_text(directory, info, sources), encoding="utf-8")


def push_to_hub(directory: Path | str, repo: str, private: bool = False) -> str:
    """Upload an output directory of ``scd generate`` to the dataset repository ``repo``
    (created if missing; :func:`scd.hub.upload`); returns the repository's URL."""
    from scd.hub import upload

    return upload(
        directory,
        repo,
        repo_type="dataset",
        key="push_to_hub",
        private=private,
        message="scd generate: dataset and card",
    )
