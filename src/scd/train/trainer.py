"""``scd train RECIPE.yaml``: LoRA / QLoRA instruction tuning with TRL's SFTTrainer + PEFT.

The recipe maps onto TRL and PEFT's own config classes (``SFTConfig``, ``LoraConfig``,
``BitsAndBytesConfig``); nothing here re-implements training. Each stage is handed what it reads
of the recipe (:class:`~scd.train.spec.TrainingSpec`); the recipe itself goes only where the run
records it (``recipe.yaml``, the W&B run's config). Loss is on the completion only
(prompt/completion rows). Runs unchanged under ``accelerate launch`` and ``torchrun``.

Output directory::

    adapter_model.safetensors, adapter_config.json   the LoRA adapter (unmerged, vLLM-servable)
    tokenizer files                                  the tokenizer the adapter was trained with
    recipe.yaml                                      the resolved recipe (secrets redacted)
    data_manifest.json                               what the SFT data was and where it came from
    train_manifest.json                              metrics: steps, loss, tokens/s, runtime
    checkpoints/                                     resumable checkpoints (``--resume``)
    data/                                            SFT data generated for this run
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from scd.config.checks import liger_problem
from scd.config.schema import Recipe, TrainSpec
from scd.errors import InputError
from scd.train.arms import method_class, padding_free_problem
from scd.train.arms.base import Method
from scd.train.bias_steps import selection
from scd.train.saving import keep_checkpoint, save_adapter, train_manifest, write_training
from scd.train.setup import (
    cut_to_max_length,
    load_model,
    lora_config,
    padding_free_keys,
    quiet_callbacks,
    score_labelled_tokens_only,
    trl_config,
)
from scd.train.sft_rows import data_dir, prepare_data
from scd.train.spec import TrainingSpec
from scd.train.training_log import (
    finish_tracking,
    last_step_logged,
    mean_loss,
    start_tracking,
    wandb_at_steps,
)

__all__ = ["build_trainer", "method_config", "sft_config", "train"]


def _is_cuda(train: TrainSpec) -> bool:
    import torch

    if train.device == "cpu":
        return False
    if train.device == "cuda" and not torch.cuda.is_available():
        raise InputError("train.device: cuda was asked for but no CUDA GPU is available")
    return torch.cuda.is_available()


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


def _last_checkpoint(out: Path) -> str | None:
    """The newest complete checkpoint: one whose ``trainer_state.json`` (written last) parses.

    A run killed while writing a checkpoint leaves a partial directory; resuming skips it.
    """
    ckpt = out / "checkpoints"  # none yet: glob finds nothing
    steps = [
        (int(p.name.removeprefix("checkpoint-")), p)
        for p in ckpt.glob("checkpoint-*")
        if p.name.removeprefix("checkpoint-").isdigit()
    ]
    for _, path in sorted(steps, reverse=True):
        with contextlib.suppress(OSError, ValueError):
            json.loads((path / "trainer_state.json").read_text())
            return str(path)
    return None


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
    from transformers import AutoTokenizer

    from scd.models.formatting import Formatter

    method = method_class(method)() if isinstance(method, str) else method
    if args is None:
        args = method_config(method, spec, cuda, report_to, progress)
    if not verbose:
        import datasets
        from transformers.utils import logging as hf_logging

        datasets.disable_progress_bars()
        hf_logging.set_verbosity_error()
    data = _rows(rows_dir, method)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(f"model {spec.model}: cannot load its tokenizer ({err})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    sample = min(method.check_sample, len(data["train"]))
    check_rows = data["train"].select(range(sample)).to_list()
    formatter = Formatter.of_rows(tokenizer, check_rows)
    data = method.render(data, formatter)
    bias = None
    if spec.train.eval_every_steps:  # its prompts (the setting's) read before the model loads
        from scd.train.bias_steps import bias_callback

        bias = bias_callback(spec, rows_dir, tokenizer)
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
    trainer.add_callback(last_step_logged())  # the training loss covers every step
    quiet_callbacks(trainer, progress, verbose)
    if bias is not None:
        bias.trainer = trainer
        trainer.add_callback(bias)
    return trainer, checked


def _check(
    recipe: Recipe, method: Method, resume: bool
) -> tuple[TrainingSpec, str, str | None, bool]:
    """What a training run needs before any work: what it reads of the recipe, the model
    resolved to a loadable path, the checkpoint to resume from (None: a new run), and whether it
    trains on a CUDA GPU.

    Raises:
        InputError: a recipe, method or output directory that cannot be trained.
    """
    from scd.models import resolve_model

    spec = TrainingSpec.of(recipe)
    if spec.model == "toy":
        raise InputError(
            "model: toy is built by `scd run`; for scd train build it with "
            "`scd toy-model --out DIR` and set model: DIR"
        )
    for _, problem in method.problems(recipe):
        raise InputError(problem)
    problem = spec.train.padding_free and padding_free_problem([method.name])
    cuda = _is_cuda(spec.train)
    problem = problem or liger_problem(recipe, cuda)
    if problem:
        raise InputError(problem)
    model_path = resolve_model(spec.model, key="model")  # a GGUF file is converted once
    out = spec.output_dir
    ours = ("checkpoints", "data", "recipe.yaml", "train_manifest.json", "adapter_config.json")
    if out.is_dir() and any(out.iterdir()) and not any((out / x).exists() for x in ours):
        raise InputError(
            f"output_dir {out}: not empty and holds no scd training; choose a new output_dir"
        )
    if out.exists() and not out.is_dir():
        raise InputError(f"output_dir {out}: exists and is not a directory")
    checkpoint = _last_checkpoint(out)
    if checkpoint and not resume:
        raise InputError(
            f"output_dir {out}: holds checkpoints; pass --resume to continue, "
            "or choose a new output_dir"
        )
    return spec, model_path, checkpoint, cuda


def _training_rows(spec: TrainingSpec, method: Method, state: Any, progress: bool) -> Path:
    """The run's training rows, generated by the main process (the others wait for them)."""
    with state.main_process_first():
        if state.is_main_process:
            rows_dir = prepare_data(spec, spec.output_dir, method)
            if not spec.data.sft and progress:
                print(f"{method.name.upper()} data generated -> {rows_dir}", flush=True)
            return rows_dir
    return data_dir(spec, spec.output_dir, method)


def _steps_to_wandb(trainer: Any, held: int) -> None:
    """W&B's step = the training step, and no step the run holds (``held``) logged again."""
    from transformers.integrations import WandbCallback

    trainer.remove_callback(WandbCallback)
    trainer.add_callback(wandb_at_steps(held))


def _keep(trainer: Any, train: TrainSpec, out: Path, checkpoints: Path) -> dict[str, Any]:
    """The adapter kept (``train.select``: the last step's, or an earlier measured step's
    weights in its place) and the tokenizer beside it; return what was selected and why."""
    selected = selection(train, trainer.state)
    if selected["step"] != trainer.state.global_step:  # train.select best: an earlier step
        keep_checkpoint(checkpoints / f"checkpoint-{selected['step']}", out)
    trainer.processing_class.save_pretrained(str(out))
    return selected


def _tokens_before(checkpoint: str | None, progress: bool) -> int:
    """The tokens of the steps a killed process trained (not timed here), saying where the
    training resumes."""
    if not checkpoint:
        return 0
    saved = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    if progress:
        from scd.progress import say

        step = saved["global_step"]
        say(f"resuming training from {checkpoint} (step {step}; the steps before it are kept)")
    return int(saved.get("num_input_tokens_seen") or 0)


def train(
    recipe: Recipe,
    *,
    method: str = "sft",
    resume: bool = False,
    use_wandb: bool = True,
    progress: bool = True,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run one recipe; return the training manifest (also written to the output dir).

    ``method``: a registered training method (:mod:`scd.config.arms`): ``sft`` (TRL's
    SFTTrainer), ``dpo`` / ``kto`` (preference tuning on the same prompts) or one of your own;
    a method with rows of its own reads them from ``data.sft``, or makes them from the SFT data
    the recipe generates.

    Under ``accelerate launch`` / ``torchrun`` the main process alone generates the training
    rows (the others wait for them), starts the W&B run and writes the manifests; every rank
    trains. ``progress=False`` drops the progress bar and its log lines (W&B still gets them);
    ``verbose=True`` shows the libraries' own output (see :func:`build_trainer`).

    Raises:
        InputError: a recipe, method or output directory that cannot be trained.
        RuntimeError: training finished but the adapter was not written.
    """
    from accelerate import PartialState

    unit: Method = method_class(method)()
    spec, model_path, checkpoint, cuda = _check(recipe, unit, resume)
    out, enabled = spec.output_dir, use_wandb and spec.wandb.enabled
    # The TRL config first: it sets up the distributed state (a PartialState made before it sees
    # one process on every rank of a CPU torchrun) and registers ZeRO-3 before the model loads.
    args = method_config(unit, spec, cuda, "wandb" if enabled else "none", progress)
    _ = args.device
    state = PartialState()
    rows_dir = _training_rows(spec, unit, state, progress)
    manifest = json.loads((rows_dir / "manifest.json").read_text())
    tracked = enabled and state.is_main_process  # one W&B run, across kills and resumes
    run, held = start_tracking(recipe, args, out, manifest, checkpoint) if tracked else (None, -1)
    earlier = _tokens_before(checkpoint, progress) if state.is_main_process else 0
    trainer, checked = build_trainer(
        spec,
        model_path,
        rows_dir,
        method=unit,
        cuda=cuda,
        progress=progress,
        verbose=verbose,
        args=args,
    )
    if enabled:  # W&B's step = the training step; none the run holds logged again
        _steps_to_wandb(trainer, held)
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=checkpoint)  # None unless --resume
    seconds = time.perf_counter() - start
    save_adapter(trainer, out, state.is_main_process)
    info: dict[str, Any] = {}
    if state.is_main_process:
        selected = _keep(trainer, spec.train, out, Path(args.output_dir))
        info = train_manifest(
            trainer,
            result,
            unit,
            spec,
            model_path,
            seconds=seconds,
            earlier=earlier,
            resumed_from=Path(checkpoint).name if checkpoint else None,
            selected=selected,
            world_size=state.num_processes,
            checked=checked,
            loss=mean_loss(trainer.state.log_history),  # every step, across resumes
            wandb_run_id=run.id if run is not None else None,
        )
        write_training(out, recipe, manifest, info, args)
        if run is not None:
            finish_tracking(run, spec.wandb.log_adapter, out, info, model_path)
    state.wait_for_everyone()
    return info
