"""The SFT rows a training run sees: its data directory (given, or generated from the recipe),
the rows rendered the way the evaluator scores them, and the check that TRL's tokenization trains
exactly the tokens evaluation scores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.train.spec import TrainingSpec

__all__ = ["check_trained_tokens", "data_dir", "prepare_data", "training_rows"]


def data_dir(spec: TrainingSpec, out: Path, method: Any = None) -> Path:
    """Where the training rows of a run of ``method`` (:class:`~scd.train.arms.base.Method`;
    None: the SFT rows) are: ``data.sft``, else what :func:`prepare_data` generates into
    ``out/data``."""
    if spec.data.sft:
        return Path(spec.data.sft)
    own = method is not None and method.own_rows
    return out / "data" / (method.name if own else "sft")


def prepare_data(spec: TrainingSpec, out: Path, method: Any = None) -> Path:
    """Return the training data directory of a run of ``method``, generating it (:func:`scd.
    data_gen.sft.prepare_sft`, into ``out/data``; for a method with rows of its own then those,
    made from the same prompts) when the spec's ``data`` asks for it."""
    from scd.data_gen.sft import prepare_sft
    from scd.models.protocols import training_protocol
    from scd.train.arms.base import RowsInput

    d = spec.data
    if d.sft:
        if not (Path(d.sft) / "train.parquet").is_file():
            raise InputError(f"data.sft {d.sft}: no train.parquet (run `scd generate sft`)")
        return Path(d.sft)
    sft = out / "data" / "sft"
    prompts, eval_prompts = prepare_sft(
        d, out / "data", [d.setting], sft, protocol=training_protocol(spec.bias.protocol)
    )
    if method is None or not method.own_rows:
        return sft
    target = data_dir(spec, out, method)
    sources = tuple(p for p in (prompts, eval_prompts) if p is not None)
    method.write_rows(RowsInput(sft, sources, d), target)
    return target


def training_rows(data: Any, formatter: Any) -> Any:
    """The SFT rows as TRL gets them: rendered the way the evaluator scores (thinking off for
    chat templates; the plain prompt format for models without one)."""
    return data.map(
        lambda r: formatter.sft_example(r["prompt"], r["completion"]),
        remove_columns=["prompt", "completion"],
        desc="Formatting SFT rows",
    )


def check_trained_tokens(
    dataset: Any, rows: list[dict[str, Any]], formatter: Any, sample: int = 64
) -> int:
    """Check, on TRL's tokenized dataset, that training trains what evaluation scores.

    For the first ``sample`` scd rows: the tokens before the completion are the evaluator's
    prompt ids, and the completion (the tokens under the loss) starts with the evaluator's option
    ids for the row's ``answer`` and goes on (the end-of-turn is trained too). Returns the number
    of rows checked.

    Raises:
        InputError: a mismatch, naming the row and both token sequences.
    """
    answered = [(i, row) for i, row in enumerate(rows) if row.get("answer")][:sample]
    for i, row in answered:
        ids = dataset[i]["input_ids"]
        mask = dataset[i].get("completion_mask")
        if mask is None:
            mask = [int(x != -100) for x in dataset[i]["labels"]]
        start = mask.index(1) if 1 in mask else len(ids)
        user = next(m["content"] for m in row["prompt"] if m["role"] == "user")
        prompt = formatter.encode([user])[0]
        option = list(formatter.reply_ids(row["answer"]))
        trained = [t for t, m in zip(ids, mask) if m]
        if ids[:start] != prompt or trained[: len(option)] != option or len(trained) <= len(option):
            decode = formatter.tokenizer.convert_ids_to_tokens
            raise InputError(
                f"training would not train what evaluation scores (row {row.get('prompt_id')}): "
                f"trained {decode(trained)} after {len(ids[:start])} prompt tokens; the evaluator "
                f"scores {decode(option)} after {len(prompt)}"
            )
    return len(answered)
