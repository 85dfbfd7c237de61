"""Instruction-tuning data for one transfer setting: conversational prompt/completion rows.

``scd generate sft --prompts DIR --setting N --out OUT`` writes

- ``OUT/train.parquet``, ``OUT/eval.parquet``: TRL-ready rows, ``prompt`` = the user turn (the
  prompt with its answer instruction), ``completion`` = the assistant turn (the unbiased answer;
  in the ``explained`` style followed by one neutral sentence; ``answer`` = that option, which
  training checks against the evaluator's option tokens). Rows are drawn equally from the
  no/positive/negative-contact prompts, capped per contact type (the paper: 10k train / 5k eval).
- ``OUT/heldout/``: the setting's whole eval part as prompt rows, for ``scd eval bias``.
- ``OUT/validation/``: the training side's prompts that no training row uses (and their
  descriptor-free baselines): what ``train.eval_every_steps`` scores during training.
- ``OUT/manifest.json``: setting, sources and their hashes, counts, options.

:func:`prepare_sft` is the one data-preparation path of ``scd train`` and ``scd run``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from scd import __version__
from scd.config.schema import SEED, STYLES, SFTOptions
from scd.config.settings import load_settings, split_masks
from scd.config.vocabulary import CONTACTS
from scd.data_gen import data_path
from scd.data_gen.card import descriptor_sources, write_card
from scd.data_gen.contact import read_baseline, read_prompts, user_text, write_prompts
from scd.data_gen.descriptors import resolve_descriptors
from scd.data_gen.general import conversation_row, load_general
from scd.errors import InputError
from scd.io import atomic_output_dir, read_yaml, sha256_file, write_json

if TYPE_CHECKING:
    from scd.config.schema import DataSpec

__all__ = ["STYLES", "prepare_sft", "sft_rows", "write_sft"]


def _pick(key: str, options: list[str]) -> str:
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return options[int.from_bytes(digest, "big") % len(options)]


def sft_rows(table: pa.Table, style: str = "short", protocol: Any = None) -> list[dict[str, Any]]:
    """Turn prompt rows into conversational SFT rows with the unbiased answer as completion, in
    the user text of an evaluation ``protocol`` (a :class:`scd.models.protocols.PromptProtocol`;
    None: scd's own)."""
    if style not in STYLES:
        raise InputError(f"expected one of {', '.join(STYLES)}", key="style", value=style)
    notes = read_yaml(data_path("sft_explanations.yaml")) if style == "explained" else {}
    rows = []
    cols = ("prompt_id", "prompt", "instruction", "unbiased_answer", "action")
    for r in table.select(list(cols)).to_pylist():
        answer = r["unbiased_answer"]
        if style == "explained":
            kind = "include" if r["action"] == "positive" else "exclude"
            answer = f"{answer}. {_pick(r['prompt_id'], notes[kind])}"
        user = user_text(r) if protocol is None else protocol.user_text(r)
        rows.append(conversation_row(user, answer, r["prompt_id"], "scd", r["unbiased_answer"]))
    return rows


def _sample_per_contact(table: pa.Table, cap: int, rng: np.random.Generator) -> pa.Table:
    """Up to ``cap`` rows of each contact type, drawn at random, kept in file order."""
    contact = table["contact"].combine_chunks().cast(pa.string()).to_numpy(zero_copy_only=False)
    groups = [np.flatnonzero(contact == c) for c in CONTACTS]
    keep = [rng.choice(i, size=cap, replace=False) if len(i) > cap else i for i in groups]
    return table.take(pa.array(np.sort(np.concatenate(keep))))


def _coverage(spec: Any, train: pa.Table, held: pa.Table) -> tuple[dict, list[str]]:
    """The filter values a setting actually found in the prompts, and a warning for each side
    that lacks some (setting 8 over a list without all 13 HolisticBias axes)."""
    used: dict[str, dict[str, list[str]]] = {}
    warnings = []
    for side, filters, part in (("train", spec.train, train), ("eval", spec.eval, held)):
        for dim, named in filters.items():
            present = set(part[dim].combine_chunks().cast(pa.string()).to_pylist())
            have = [v for v in named if v in present]
            used.setdefault(side, {})[dim] = have
            lacking = [v for v in named if v not in present]
            if lacking:
                warnings.append(
                    f"setting {spec.number}: {'trains' if side == 'train' else 'evaluates'} on "
                    f"{len(have)} of the {len(named)} {dim} values it names ({', '.join(have)}); "
                    f"these prompts have no {', '.join(lacking)}"
                )
    return used, warnings


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema(
        [
            ("prompt", pa.list_(message)),
            ("completion", pa.list_(message)),
            ("prompt_id", pa.string()),
            ("source", pa.string()),
            ("answer", pa.string()),  # the option the completion starts with (scd rows)
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="zstd")


def _split(
    prompts: Path | str, eval_prompts: Path | str | None, setting: int, spec: Any, seed: int
) -> tuple[pa.Table, pa.Table]:
    """The setting's training and held-out prompts: a split of one prompt set, or (a setting
    that evaluates on another source) the whole set and the second one, less the texts both
    hold (training keeps them)."""
    table = read_prompts(prompts)
    if spec.split != "source":
        train_mask, eval_mask = split_masks(table, spec, seed)
        return table.filter(train_mask), table.filter(eval_mask)
    if not eval_prompts:
        raise InputError(
            f"--setting {setting} evaluates on a second prompt set: pass --eval-prompts DIR "
            "(e.g. from `scd generate contact --descriptors stigma`)"
        )
    eval_part = read_prompts(eval_prompts)
    overlap = pc.is_in(eval_part["prompt"], value_set=table["prompt"].combine_chunks())
    return table, eval_part.filter(pc.invert(overlap))


def _write_heldout(
    out: Path, eval_part: pa.Table, baseline: pa.Table | None, info: dict[str, Any]
) -> None:
    """``heldout/``: the held-out prompts, the descriptor-free baselines of their scales, and a
    manifest."""
    out.mkdir()
    pq.write_table(eval_part, out / "prompts.parquet", compression="zstd")
    if baseline is not None:
        scales = pc.unique(eval_part["scale"].combine_chunks().cast(pa.string()))
        keep = pc.is_in(baseline["scale"].combine_chunks().cast(pa.string()), value_set=scales)
        pq.write_table(baseline.filter(keep), out / "baseline.parquet", compression="zstd")
    write_json(out / "manifest.json", {**info, "kind": "heldout_prompts"})


def _checked_spec(setting: int, options: SFTOptions) -> Any:
    """The setting's spec in the options' settings file, once the options are checked.

    Raises:
        InputError: no such setting, or an option out of its range (one line each).
    """
    settings = load_settings(options.settings_file)
    if setting not in settings:
        raise InputError(f"expected one of {sorted(settings)}", key="setting", value=setting)
    options.check()
    if options.general_fraction > 0 and not options.general:
        raise InputError("needs general data (a file or Hub dataset id)", key="general_fraction")
    return settings[setting]


def _draw(
    train_part: pa.Table, eval_part: pa.Table, options: SFTOptions, protocol: Any
) -> tuple[pa.Table, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The setting's SFT rows, drawn with the options' seed: the training prompts sampled (up to
    ``max_train`` per contact type), the training rows made of them with the general rows mixed
    in (``general_fraction`` of them) and shuffled, the eval rows (up to ``max_eval`` prompts per
    contact type), and the general rows; each row opened by the ``protocol``'s system prompt
    when it has one."""
    style, seed = options.style, options.seed
    general, general_fraction = options.general, options.general_fraction
    system = None if protocol is None else protocol.system_prompt
    rng = np.random.default_rng(seed)
    trained = _sample_per_contact(train_part, options.max_train, rng)
    train_rows = sft_rows(trained, style, protocol)
    eval_rows = sft_rows(_sample_per_contact(eval_part, options.max_eval, rng), style, protocol)
    want = round(general_fraction / (1 - general_fraction) * len(train_rows))
    general_rows = load_general(general, want, seed) if general_fraction > 0 else []
    train_rows += general_rows
    train_rows = [train_rows[i] for i in rng.permutation(len(train_rows))]
    if system is not None:  # every row, the general ones too, as the evaluation puts it
        for row in train_rows + eval_rows:
            row["prompt"] = [{"role": "system", "content": system}, *row["prompt"]]
    return trained, train_rows, eval_rows, general_rows


def _counts(
    train_rows: list[Any], eval_rows: list[Any], pool: pa.Table, trained: pa.Table, held: pa.Table
) -> dict[str, int]:
    """The manifest's counts: the training and eval rows, the held-out prompts, the training
    side's prompts and those of them no training row uses (the validation prompts)."""
    return {
        "train": len(train_rows),
        "eval": len(eval_rows),
        "heldout_prompts": held.num_rows,
        "train_pool_prompts": pool.num_rows,
        "validation_prompts": pool.num_rows - trained.num_rows,
    }


def write_sft(
    prompts: Path | str,
    setting: int,
    out: Path | str,
    *,
    eval_prompts: Path | str | None = None,
    settings_file: Path | str | None = None,
    style: str = "short",
    max_train: int = 10000,
    max_eval: int = 5000,
    general: str | None = None,
    general_fraction: float = 0.0,
    seed: int = SEED,
    protocol: Any = None,
) -> dict[str, Any]:
    """Build and atomically write the SFT data of one setting (see the module docstring), in the
    text of an evaluation ``protocol`` that trains through the chat template (None: scd's;
    :func:`scd.models.protocols.training_protocol`): its user text, and its system prompt as
    each row's first message.

    Returns:
        The manifest that was written.
    """
    options = SFTOptions(settings_file, style, max_train, max_eval, general, general_fraction, seed)
    spec = _checked_spec(setting, options)
    train_part, eval_part = _split(prompts, eval_prompts, setting, spec, seed)
    sources = {"prompts": sha256_file(Path(prompts) / "prompts.parquet")}
    if spec.split == "source":
        sources["eval_prompts"] = sha256_file(Path(eval_prompts) / "prompts.parquet")
    used, warnings = _coverage(spec, train_part, eval_part)
    trained, train_rows, eval_rows, general_rows = _draw(train_part, eval_part, options, protocol)
    lacking = "; it ".join(w.split(": ", 1)[1] for w in warnings)
    info = {
        "kind": "sft",
        "scd_version": __version__,
        "setting": setting,
        "description": spec.description + (f"; with these prompts it {lacking}" if lacking else ""),
        "description_paper": spec.description,
        "used": used,
        "warnings": warnings,
        "split": spec.split,
        "style": style,
        "seed": seed,
        "max_train_per_contact": max_train,
        "max_eval_per_contact": max_eval,
        "general": {"source": general, "fraction": general_fraction, "rows": len(general_rows)},
        **({"protocol": protocol.name} if protocol and protocol.name != "scd" else {}),
        "sources_sha256": sources,
        "counts": _counts(train_rows, eval_rows, train_part, trained, eval_part),
    }
    with atomic_output_dir(out, "sft") as tmp:
        _write_rows(tmp / "train.parquet", train_rows)
        _write_rows(tmp / "eval.parquet", eval_rows)
        baseline = read_baseline(eval_prompts if spec.split == "source" else prompts)
        _write_heldout(tmp / "heldout", eval_part, baseline, info)
        _write_validation(tmp / "validation", train_part, trained, read_baseline(prompts), info)
        write_json(tmp / "manifest.json", info)
        write_card(tmp, info, descriptor_sources([prompts, eval_prompts]))
    return info


def _write_validation(
    out: Path, pool: pa.Table, trained: pa.Table, baseline: Any, info: dict[str, Any]
) -> None:
    """The validation prompts: those of the training side that no training row uses, with the
    descriptor-free baselines of their scales -- what ``train.eval_every_steps`` scores while a
    model trains, never a held-out prompt (the baselines carry no descriptor; where training and
    held-out prompts share a scale, so do their baselines)."""
    out.mkdir()
    unused = pc.invert(pc.is_in(pool["prompt_id"], value_set=trained["prompt_id"].combine_chunks()))
    part = pool.filter(unused)
    pq.write_table(part, out / "prompts.parquet", compression="zstd")
    if baseline is not None:
        scales = pc.unique(part["scale"].combine_chunks().cast(pa.string()))
        keep = pc.is_in(baseline["scale"].combine_chunks().cast(pa.string()), value_set=scales)
        pq.write_table(baseline.filter(keep), out / "baseline.parquet", compression="zstd")
    write_json(out / "manifest.json", {**info, "kind": "validation_prompts"})


def prepare_sft(
    data: DataSpec,
    root: Path,
    settings: Sequence[int],
    sft: Path | None = None,
    *,
    step: Callable[[str, Path, Callable[[], Any]], Any] | None = None,
    protocol: Any = None,
) -> tuple[Path, Path | None]:
    """A recipe's ``data`` section -> its prompts -> a second prompt set when one of ``settings``
    splits by source (the settings of ``data.settings_file``, else the packaged ones) -> with
    ``sft`` (and one setting ``N``), the setting's SFT data in ``sft``.

    Each step goes to ``step(name, the file it writes last, work)``, which runs each at once by
    default (``scd train``) and as a resumable stage under ``scd run``: ``prompts`` (into
    ``root/prompts``, with ``data.descriptors``), ``eval_prompts`` (into ``root/eval_prompts``
    from ``data.eval_descriptors``, unless ``data.eval_prompts`` names them), ``setting-<N>/sft``.

    Returns:
        The prompt directory, and the second prompt set (None when no setting splits by source).
    """
    d, table = data, load_settings(data.settings_file)
    step = step or (lambda name, output, work: work())
    prompts = Path(d.prompts) if d.prompts else root / "prompts"
    if d.descriptors:
        step(
            "prompts",
            prompts / "manifest.json",
            lambda: write_prompts(
                prompts, resolve_descriptors(d.descriptors, version=d.hb_version)
            ),
        )
    source = any(table[n].split == "source" for n in settings)
    eval_prompts = Path(d.eval_prompts or root / "eval_prompts") if source else None
    if source and not d.eval_prompts:
        step(
            "eval_prompts",
            eval_prompts / "manifest.json",
            lambda: write_prompts(
                eval_prompts, resolve_descriptors(d.eval_descriptors or "stigma")
            ),
        )
    if sft is not None:
        (n,) = settings
        step(
            f"setting-{n}/sft",
            sft / "manifest.json",
            lambda: write_sft(
                prompts,
                n,
                sft,
                eval_prompts=eval_prompts,
                settings_file=d.settings_file,
                style=d.style,
                max_train=d.max_train,
                max_eval=d.max_eval,
                general=d.general,
                general_fraction=d.general_fraction,
                seed=d.seed,
                protocol=protocol,
            ),
        )
    return prompts, eval_prompts
