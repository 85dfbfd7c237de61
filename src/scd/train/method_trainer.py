"""TRL's config and trainer of a training method (SFT, DPO, KTO ...): :func:`build_trainer`, the
same for every method -- the method says which trainer and config, how its rows are rendered and
how TRL's tokens are checked (what every method's trainer shares: :mod:`scd.train.setup`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.train.arms import method_class
from scd.train.arms.base import Method
from scd.train.setup import (
    cut_to_max_length,
    load_model,
    lora_config,
    padding_free_keys,
    quiet_callbacks,
    score_labelled_tokens_only,
    trl_config,
)
from scd.train.spec import TrainingSpec
from scd.train.training_log import last_step_logged

__all__ = ["build_trainer", "method_config", "sft_config"]


def method_config(
    method: Method, spec: TrainingSpec, cuda: bool, report_to: str, progress: bool = True
) -> Any:
    """TRL's config of ``method`` (its class: SFTConfig, DPOConfig ...) for the spec
    (:func:`~scd.train.setup.trl_config`), with what the method sets itself (its options)."""
    values = method.config_values(spec)
    values.update(padding_free_keys(method, spec.train))
    return trl_config(spec, method.config(), cuda, report_to, progress, **values)


def sft_config(spec: TrainingSpec, cuda: bool, report_to: str, progress: bool = True) -> Any:
    """TRL SFTConfig of the spec (:func:`method_config` of SFT): the loss on the completion
    only."""
    return method_config(method_class("sft")(), spec, cuda, report_to, progress)


def _rows(rows_dir: Path, method: Method) -> Any:
    """The training rows (``train``, ``eval``) of ``rows_dir``, checked for the columns the
    method reads."""
    from datasets import load_dataset

    files = {"train": str(rows_dir / "train.parquet"), "eval": str(rows_dir / "eval.parquet")}
    data = load_dataset("parquet", data_files=files)
    for column in method.columns:
        if column not in data["train"].column_names:
            raise InputError(
                f"{rows_dir}/train.parquet: no {column!r} column (not {method.name} rows; "
                "see scd.train.arms)"
            )
    return data


def _quiet_libraries() -> None:
    """The libraries' own output off: datasets' progress bars, transformers' logs below errors."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()


def _tokenizer(spec: TrainingSpec, model_path: str) -> Any:
    """The model's tokenizer, padding with its end-of-sequence token when it has no pad token.

    Raises:
        InputError: the tokenizer cannot be loaded.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(f"model {spec.model}: cannot load its tokenizer ({err})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _bias_while_training(spec: TrainingSpec, rows_dir: Path, tokenizer: Any) -> Any:
    """The callback that measures bias every ``train.eval_every_steps`` (None: not asked for),
    its prompts (the setting's) read before the model loads."""
    if not spec.train.eval_every_steps:
        return None
    from scd.train.bias_steps import bias_callback

    return bias_callback(spec, rows_dir, tokenizer)


def _add_callbacks(trainer: Any, bias: Any, progress: bool, verbose: bool) -> None:
    """The trainer's callbacks added: the last step logged, the progress output
    (:func:`~scd.train.setup.quiet_callbacks`) and the bias measured during training (``bias``;
    None: none)."""
    trainer.add_callback(last_step_logged())  # the training loss covers every step
    quiet_callbacks(trainer, progress, verbose)
    if bias is not None:
        bias.trainer = trainer
        trainer.add_callback(bias)


def build_trainer(
    spec: TrainingSpec,
    model_path: str,
    rows_dir: Path,
    *,
    method: Method | str = "sft",
    cuda: bool,
    report_to: str = "none",
    progress: bool = True,
    verbose: bool = False,
    args: Any = None,
) -> tuple[Any, int]:
    """TRL's trainer of ``method`` (SFT by default) for a training spec
    (:meth:`TrainingSpec.of <scd.train.spec.TrainingSpec.of>` a recipe), the rows in ``rows_dir``
    and a loadable model (``model_path``: the spec's model resolved); nothing trained yet. The
    same for every method: the method says which trainer and config, how its rows are rendered
    and how TRL's tokens are checked.

    ``args``: the run's TRL config (default: :func:`method_config`). It exists before the model
    is loaded, so that a DeepSpeed ZeRO-3 config reaches ``from_pretrained``.

    The rows go to TRL as the evaluator formats them, and TRL's tokenized dataset is checked
    against the evaluator's tokens (:meth:`scd.train.arms.base.Method.check_tokens`).
    ``progress``: a progress bar with one line per logging step (``verbose``: the libraries' own
    output -- dataset bars, warnings, raw log dicts); without it, nothing is printed.

    Returns:
        The trainer, and how many rows the token check covered (0 with packing).
    """
    from scd.models.formatting import Formatter

    method = method_class(method)() if isinstance(method, str) else method
    if args is None:
        args = method_config(method, spec, cuda, report_to, progress)
    if not verbose:
        _quiet_libraries()
    data = _rows(rows_dir, method)
    tokenizer = _tokenizer(spec, model_path)
    sample = min(method.check_sample, len(data["train"]))
    check_rows = data["train"].select(range(sample)).to_list()
    formatter = Formatter.of_rows(tokenizer, check_rows)
    data = method.render(data, formatter)
    bias = _bias_while_training(spec, rows_dir, tokenizer)
    if not cuda:
        score_labelled_tokens_only()  # TRL's LM head: not over every unlabelled token
    trainer = method.trainer()(
        model=load_model(spec, model_path, cuda),
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["eval"] if spec.train.eval_steps else None,
        processing_class=tokenizer,
        peft_config=lora_config(spec.lora),
    )
    if getattr(args, "padding_free", False) and not getattr(args, "packing", False):
        cut_to_max_length(trainer, spec.train.max_length)  # as TRL's padded path cuts them
    checked = method.check_tokens(trainer.train_dataset, check_rows, formatter, spec)
    _add_callbacks(trainer, bias, progress, verbose)
    return trainer, checked
