"""Preference tuning of the arena's ``dpo`` and ``kto`` arms: TRL's DPOTrainer / KTOTrainer
with the same LoRA adapter, model loading and hyperparameters as SFT (:mod:`scd.train.trainer`).

With a PEFT adapter and no ``ref_model`` TRL takes the reference from the same model with the
adapter switched off (``trl.trainer.utils.use_adapter(model, None)`` in DPO's
``compute_ref_log_probs`` and KTO's): the untuned base model, with no second copy in memory.

The rows (:mod:`scd.data_gen.arms`) go to TRL rendered as the evaluator scores them, and TRL's
tokenized rows are checked against the evaluator's tokens, as for SFT: the prompt tokens are
the evaluator's prompt, the chosen (desirable) completion starts with the unbiased option's
tokens and the rejected (undesirable) one with the biased option's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.config.schema import Recipe
from scd.errors import InputError

__all__ = ["build_preference_trainer", "check_preference_tokens", "preference_config"]


def preference_config(
    recipe: Recipe, method: str, out: Path, cuda: bool, report_to: str, progress: bool = True
) -> Any:
    """TRL's ``DPOConfig`` or ``KTOConfig`` of the recipe: its ``train`` keys and
    ``arena.beta``; KTO reads its rows in order (its KL term pairs each with the next)."""
    from trl import DPOConfig, KTOConfig

    from scd.train.setup import trl_config

    if method == "dpo":
        return trl_config(recipe, DPOConfig, out, cuda, report_to, progress, beta=recipe.arena.beta)
    return trl_config(
        recipe,
        KTOConfig,
        out,
        cuda,
        report_to,
        progress,
        beta=recipe.arena.beta,
        train_sampling_strategy="sequential",
    )


def _rendered(row: dict[str, Any], formatter: Any) -> dict[str, Any]:
    """A preference row as TRL gets it: conversational for chat models (with the template's
    kwargs), the plain prompt text and ``" " + answer`` otherwise -- as :meth:`Formatter.
    sft_example` renders an SFT row."""
    replies = [k for k in ("chosen", "rejected", "completion") if k in row]
    out = {}
    for key in replies:
        example = formatter.sft_example(row["prompt"], row[key])
        out["prompt"], out[key] = example["prompt"], example["completion"]
        if "chat_template_kwargs" in example:
            out["chat_template_kwargs"] = example["chat_template_kwargs"]
    return out


def check_preference_tokens(
    dataset: Any, rows: list[dict[str, Any]], formatter: Any, sample: int = 64
) -> int:
    """Check, on TRL's tokenized rows, that preference training trains what evaluation scores
    (see the module docstring); return the number of rows checked.

    Raises:
        InputError: a mismatch, naming the row and both token sequences.
    """
    decode = formatter.tokenizer.convert_ids_to_tokens
    for i, row in enumerate(rows[:sample]):
        user = next(m["content"] for m in row["prompt"] if m["role"] == "user")
        prompt = formatter.encode([user])[0]
        done = dataset[i]
        pairs = (
            [("chosen_ids", row["answer"]), ("rejected_ids", row["rejected_answer"])]
            if "chosen_ids" in done
            else [("completion_ids", row["answer"])]
        )
        for key, option in pairs:
            want = list(formatter.reply_ids(option))
            got = list(done[key])
            if list(done["prompt_ids"]) != prompt or got[: len(want)] != want:
                raise InputError(
                    f"preference training would not train what evaluation scores (row "
                    f"{row.get('prompt_id')}, {key}): {decode(got)} after "
                    f"{len(done['prompt_ids'])} prompt tokens; the evaluator scores "
                    f"{decode(want)} after {len(prompt)}"
                )
    return min(sample, len(rows))


def build_preference_trainer(
    recipe: Recipe,
    method: str,
    model_path: str,
    data_dir: Path,
    out: Path,
    *,
    cuda: bool,
    report_to: str = "none",
    progress: bool = True,
    verbose: bool = False,
    args: Any = None,
) -> tuple[Any, int]:
    """TRL's DPOTrainer (``method`` ``dpo``) or KTOTrainer (``kto``) for the rows in
    ``data_dir`` (:func:`scd.data_gen.arms.write_preference_rows`); nothing trained yet.
    See :func:`scd.train.trainer.build_trainer` for the other arguments.

    Returns:
        The trainer, and how many rows the token check covered.
    """
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import DPOTrainer, KTOTrainer

    from scd.models.formatting import Formatter
    from scd.train.setup import load_model, lora_config, quiet_callbacks
    from scd.train.sft_rows import system_message

    if args is None:
        args = preference_config(recipe, method, out, cuda, report_to, progress)
    if not verbose:
        import datasets
        from transformers.utils import logging as hf_logging

        datasets.disable_progress_bars()
        hf_logging.set_verbosity_error()
    files = {"train": str(data_dir / "train.parquet"), "eval": str(data_dir / "eval.parquet")}
    data = load_dataset("parquet", data_files=files)
    needed = {"dpo": "chosen", "kto": "label"}[method]
    if needed not in data["train"].column_names:
        raise InputError(
            f"{data_dir}/train.parquet: no {needed!r} column (not {method} rows; "
            "see scd.data_gen.arms)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(f"model {recipe.model}: cannot load its tokenizer ({err})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    check_rows = data["train"].select(range(min(64, len(data["train"])))).to_list()
    formatter = Formatter(tokenizer, system_message(check_rows))
    keep = [
        c
        for c in ("prompt", "chosen", "rejected", "completion", "label")
        if c in data["train"].column_names
    ]
    data = data.select_columns(keep).map(
        lambda r: _rendered(r, formatter), desc=f"Formatting {method} rows"
    )
    bias = None
    if recipe.train.eval_every_steps:  # its prompts (the setting's) read before the model loads
        from scd.train.bias_steps import bias_callback

        bias = bias_callback(recipe, data_dir, tokenizer)
    cls = DPOTrainer if method == "dpo" else KTOTrainer
    trainer = cls(
        model=load_model(recipe, model_path, cuda),
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["eval"] if recipe.train.eval_steps else None,
        processing_class=tokenizer,
        peft_config=lora_config(recipe),
    )
    checked = check_preference_tokens(trainer.train_dataset, check_rows, formatter)
    quiet_callbacks(trainer, progress, verbose)
    if bias is not None:
        bias.trainer = trainer
        trainer.add_callback(bias)
    return trainer, checked
