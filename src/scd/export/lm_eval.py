"""``scd export lm-eval``: the contact prompts (and the Social Distance Scale probe) as a task
directory of lm-evaluation-harness, run with ``lm_eval --include_path DIR --tasks scd``::

    scd_contact_<scale>.yaml           one task per scale: bias %, per contact type and overall
    scd_contact_<scale>_baseline.yaml  the descriptor-free baselines of the same templates
    scd_contact.yaml, scd_contact_baseline.yaml, scd.yaml   groups (all scales; everything)
    scd_sds.yaml                       with --stigma-prompts: the SDS gap
    <task>.jsonl                       the documents, read locally (no Hub, works offline)
    utils.py                           the scoring (:mod:`scd.export.lm_eval_task`, copied)

The documents are the work list of ``scd eval bias`` (the same ``--limit`` subset) and the user
messages and options it scores. ``chat`` (default): the user message is the document's text, for
``--apply_chat_template`` (and ``--system_instruction``), which renders it with the model's
template and scores each option right after the generation prompt, as scd does. ``plain``: scd's
format for models without a chat template (``{user}\\nAnswer:``, options after a space).

Groups average their tasks weighted by size; every document of a task gives every metric, so
``bias`` is the pooled rate, and so is ``bias_<contact>`` because each prompt set holds one
prompt per contact type (checked here: where a task's contact types are not balanced, the group
leaves the per-contact metrics out).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from scd import __version__
from scd.errors import InputError
from scd.io import atomic_output_dir, check_output_dir, read_manifest, sha256_file, write_json

__all__ = ["FORMATS", "LM_EVAL_VERSION", "export_lm_eval"]

KIND = "lm_eval_task"
FORMATS = ("chat", "plain")
LM_EVAL_VERSION = "0.4.13"  # the version the export is tested with
CONTACTS = ("none", "positive", "negative")
_TEXT = {"chat": "text", "plain": '"{{text}}\\nAnswer:"'}


def _check_kind(directory: Path | str, key: str, kinds: tuple[str, ...], command: str) -> None:
    if read_manifest(directory).get("kind") not in kinds:
        raise InputError(
            f"not an output of `{command}` (no manifest.json of kind {' or '.join(kinds)})",
            key=key,
            value=directory,
        )


def _contact_docs(prompts: Path | str, limit: int | None, seed: int) -> dict[str, list[dict]]:
    from scd.data_gen.contact import read_prompts, user_text
    from scd.eval.benchmarks.bias.task import ROW_KEYS, load_work

    _check_kind(prompts, "prompts", ("contact_prompts", "heldout_prompts"), "scd generate contact")
    n = read_prompts(prompts).num_rows
    if limit is not None and limit > n:
        raise InputError(
            f"above the {n:,} descriptor prompts of {prompts}", key="limit", value=limit
        )
    tasks: dict[str, list[dict]] = {}
    for r in load_work(prompts, limit, seed):
        options = list(r["options"])
        doc = {k: r[k] for k in ROW_KEYS}
        doc.update(
            baseline=r["baseline"],
            text=user_text(r),
            options=options,
            target=options.index(r["unbiased_answer"]),
            unbiased_answer=r["unbiased_answer"],
            biased_answer=r["biased_answer"],
        )
        name = f"scd_contact_{r['scale']}" + ("_baseline" if r["baseline"] else "")
        tasks.setdefault(name, []).append(doc)
    return tasks


def _sds_docs(stigma: Path | str) -> list[dict]:
    from scd.data_gen.stigma_probes import read_stigma_table
    from scd.eval.benchmarks.stigma.sds import OPTIONS, RECORD_KEYS, causal_text

    _check_kind(stigma, "stigma_prompts", ("stigma_prompts",), "scd generate stigma")
    rows = read_stigma_table(stigma, "sds")
    return [
        {
            **{k: r[k] for k in RECORD_KEYS},
            "text": causal_text(r["prompt"]),
            "options": list(OPTIONS),
            "target": 0,
        }
        for r in rows
    ]


def _metric(name: str, aggregation: str) -> str:
    return f"  - metric: {name}\n    aggregation: {aggregation}\n    higher_is_better: false\n"


def _task_yaml(name: str, fmt: str, process: str, metrics: list[str]) -> str:
    aggregations = "".join(
        _metric(m, "mean" if m == "bias" else f"!function utils.{m}") for m in metrics
    )
    return (
        f"task: {name}\ncustom_dataset: !function utils.load_docs\n"
        f"dataset_kwargs:\n  file: {name}.jsonl\ntest_split: test\n"
        f"output_type: multiple_choice\ndoc_to_text: {_TEXT[fmt]}\n"
        'doc_to_choice: options\ndoc_to_target: target\ntarget_delimiter: " "\n'
        f"process_results: !function utils.{process}\nmetric_list:\n{aggregations}"
        "metadata:\n  version: 1.0\n"
    )


def _group_yaml(name: str, tasks: list[str], metrics: list[str]) -> str:
    lines = [f"group: {name}", "task:", *(f"  - {t}" for t in tasks)]
    if metrics:
        lines.append("aggregate_metric_list:")
        for m in metrics:
            lines += [f"  - metric: {m}", "    aggregation: mean", "    weight_by_size: true"]
    return "\n".join([*lines, "metadata:", "  version: 1.0", ""])


Groups = dict[str, tuple[list[str], list[str]]]  # group name -> (its tasks, its metrics)


def _task_configs(docs: dict[str, list[dict]], fmt: str) -> tuple[dict[str, str], Groups]:
    """Each task's YAML, by task name, and the contact groups (all scales; their baselines)
    with the metrics they aggregate: the per-contact ones only where every task is balanced."""
    yamls, groups = {}, {}
    contact = [n for n in docs if n.startswith("scd_contact_")]
    for suffix in ("", "_baseline"):
        names = [n for n in contact if n.endswith("_baseline") == bool(suffix)]
        if not names:
            continue
        per_contact = [f"bias_{c}" for c in CONTACTS]
        balanced = all(
            len(set(Counter(d["contact"] for d in docs[n]).values())) == 1 for n in names
        )
        for n in names:
            yamls[n] = _task_yaml(n, fmt, "process_contact", ["bias", *per_contact])
        groups[f"scd_contact{suffix}"] = (names, ["bias", *(per_contact if balanced else [])])
    if "scd_sds" in docs:
        metrics = ["sds_gap", "sds_stigmatized", "sds_non_stigmatized"]
        yamls["scd_sds"] = _task_yaml("scd_sds", fmt, "process_sds", metrics)
    return yamls, groups


def _write_tasks(
    tmp: Path, docs: dict[str, list[dict]], yamls: dict[str, str], groups: Groups
) -> None:
    """Write into ``tmp`` each task's documents and YAML, the groups' YAML (``scd`` holding
    them all) and ``utils.py``."""
    for name, rows in docs.items():
        with open(tmp / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (tmp / f"{name}.yaml").write_text(yamls[name])
    for name, (names, metrics) in groups.items():
        (tmp / f"{name}.yaml").write_text(_group_yaml(name, names, metrics))
    everything = [*groups, *(["scd_sds"] if "scd_sds" in docs else [])]
    (tmp / "scd.yaml").write_text(_group_yaml("scd", everything, []))
    shutil.copyfile(Path(__file__).with_name("lm_eval_task.py"), tmp / "utils.py")


def export_lm_eval(
    out: Path | str,
    *,
    prompts: Path | str | None = None,
    stigma: Path | str | None = None,
    limit: int | None = None,
    seed: int = 0,
    fmt: str = "chat",
) -> dict[str, Any]:
    """Write the lm-eval task directory ``out`` (atomically; see the module doc).

    Args:
        out: The task directory (an earlier export there is replaced).
        prompts: A directory of ``scd generate contact`` (or the held-out prompts of an SFT
            directory).
        stigma: A directory of ``scd generate stigma``: adds the SDS task.
        limit: ~N descriptor prompts, the stratified subset of ``scd eval bias --limit N``.
        seed: The subset's seed (``scd eval bias --seed``).
        fmt: ``chat`` (run with ``--apply_chat_template``) or ``plain``.

    Returns:
        The manifest written into ``out``: the tasks and their document counts.

    Raises:
        InputError: no source, a source that is not an scd output, ``limit`` above the prompt
            count, an unknown format, or an ``out`` that holds something else.
    """
    if fmt not in FORMATS:
        raise InputError(f"expected one of {', '.join(FORMATS)}", key="format", value=fmt)
    if prompts is None and stigma is None:
        raise InputError("nothing to export: give --prompts and/or --stigma-prompts")
    check_output_dir(out, KIND)
    docs = _contact_docs(prompts, limit, seed) if prompts is not None else {}
    if stigma is not None:
        docs["scd_sds"] = _sds_docs(stigma)
    yamls, groups = _task_configs(docs, fmt)
    info = {
        "kind": KIND,
        "scd_version": __version__,
        "lm_eval_version": LM_EVAL_VERSION,
        "format": fmt,
        "limit": limit,
        "seed": seed,
        "prompts": None
        if prompts is None
        else {"path": str(prompts), "sha256": sha256_file(Path(prompts) / "prompts.parquet")},
        "stigma_prompts": None
        if stigma is None
        else {"path": str(stigma), "sha256": sha256_file(Path(stigma) / "sds.parquet")},
        "tasks": {name: len(rows) for name, rows in docs.items()},
        "groups": {name: names for name, (names, _) in groups.items()},
    }
    with atomic_output_dir(out, KIND) as tmp:
        _write_tasks(tmp, docs, yamls, groups)
        write_json(tmp / "manifest.json", info)
    return info
