"""``scd train RECIPE.yaml``: LoRA / QLoRA instruction tuning with TRL's SFTTrainer + PEFT.

The recipe maps onto TRL and PEFT's own config classes (``SFTConfig``, ``LoraConfig``,
``BitsAndBytesConfig``); nothing here re-implements training. Loss is on the completion only
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

import yaml

from scd import __version__
from scd.config.schema import TRAIN_METHODS, Recipe
from scd.errors import InputError
from scd.io import atomic_file, write_json
from scd.tracking import finish_run, held_step, redact, start_run
from scd.train.bias_steps import KEYS as BIAS_KEYS
from scd.train.bias_steps import selection
from scd.train.saving import keep_checkpoint, log_adapter, save_adapter
from scd.train.setup import load_model, lora_config, quiet_callbacks, trl_config
from scd.train.sft_rows import (
    check_trained_tokens,
    data_dir,
    prepare_data,
    system_message,
    training_rows,
)
from scd.train.training_log import log_history, mean_loss, wandb_at_steps

__all__ = ["METHODS", "build_trainer", "sft_config", "train"]


METHODS = TRAIN_METHODS  # how an adapter is trained: TRL's SFT, DPO or KTO trainer


def _is_cuda(recipe: Recipe) -> bool:
    import torch

    if recipe.train.device == "cpu":
        return False
    if recipe.train.device == "cuda" and not torch.cuda.is_available():
        raise InputError("train.device: cuda was asked for but no CUDA GPU is available")
    return torch.cuda.is_available()


def sft_config(recipe: Recipe, out: Path, cuda: bool, report_to: str, progress: bool = True) -> Any:
    """TRL SFTConfig of the recipe (:func:`trl_config`); the loss is on the completion only."""
    from trl import SFTConfig

    return trl_config(recipe, SFTConfig, out, cuda, report_to, progress, completion_only_loss=True)


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


def build_trainer(
    recipe: Recipe,
    model_path: str,
    sft_dir: Path,
    out: Path,
    *,
    cuda: bool,
    report_to: str = "none",
    progress: bool = True,
    verbose: bool = False,
    args: Any = None,
) -> tuple[Any, int]:
    """TRL's SFTTrainer for a recipe, its SFT data and a loadable model; nothing trained yet.

    ``args``: the run's ``SFTConfig`` (default: :func:`sft_config`). It exists before the model
    is loaded, so that a DeepSpeed ZeRO-3 config reaches ``from_pretrained``.

    The rows go to TRL as the evaluator formats them, and TRL's tokenized dataset is checked
    against the evaluator's tokens (:mod:`scd.train.sft_rows`).
    ``progress``: a progress bar with one line per logging step (``verbose``: the libraries' own
    output -- dataset bars, warnings, raw log dicts); without it, nothing is printed.

    Returns:
        The trainer, and how many rows the token check covered (0 with packing).
    """
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    from scd.models.formatting import Formatter

    if args is None:
        args = sft_config(recipe, out, cuda, report_to, progress)
    if not verbose:
        import datasets
        from transformers.utils import logging as hf_logging

        datasets.disable_progress_bars()
        hf_logging.set_verbosity_error()
    files = {"train": str(sft_dir / "train.parquet"), "eval": str(sft_dir / "eval.parquet")}
    data = load_dataset("parquet", data_files=files)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(f"model {recipe.model}: cannot load its tokenizer ({err})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    check_rows = data["train"].select(range(min(256, len(data["train"])))).to_list()
    formatter = Formatter(tokenizer, system_message(check_rows))
    data = training_rows(data.select_columns(["prompt", "completion"]), formatter)
    bias = None
    if recipe.train.eval_every_steps:  # its prompts read before the model loads
        from scd.train.bias_steps import bias_callback

        bias = bias_callback(recipe, sft_dir, tokenizer)
    trainer = SFTTrainer(
        model=load_model(recipe, model_path, cuda),
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["eval"] if recipe.train.eval_steps else None,
        processing_class=tokenizer,
        peft_config=lora_config(recipe),
    )
    checked = 0
    if not recipe.train.packing:  # packed rows no longer line up with the SFT rows
        checked = check_trained_tokens(trainer.train_dataset, check_rows, formatter)
    quiet_callbacks(trainer, progress, verbose)
    if bias is not None:
        bias.trainer = trainer
        trainer.add_callback(bias)
    return trainer, checked


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

    ``method``: ``sft`` (TRL's SFTTrainer), or ``dpo`` / ``kto`` (preference tuning on the same
    prompts, :mod:`scd.train.preference`; ``data.sft`` then names the arm's rows, or they are
    made from the SFT data the recipe generates).

    Under ``accelerate launch`` / ``torchrun`` the main process alone generates the SFT data
    (the others wait for it), starts the W&B run and writes the manifests; every rank trains.
    ``progress=False`` drops the progress bar and its log lines (W&B still gets them);
    ``verbose=True`` shows the libraries' own output (see :func:`build_trainer`).

    Raises:
        InputError: a recipe or output directory that cannot be trained.
        RuntimeError: training finished but the adapter was not written.
    """
    from accelerate import PartialState

    from scd.models import model_fingerprint, resolve_model

    if recipe.output_dir is None:
        raise InputError("recipe: output_dir: needed by scd train (scd run chooses its own)")
    if recipe.model == "toy":
        raise InputError(
            "model: toy is built by `scd run`; for scd train build it with "
            "`scd toy-model --out DIR` and set model: DIR"
        )
    model_path = resolve_model(recipe.model, key="model")  # a GGUF file is converted once
    out = Path(recipe.output_dir)
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
    if method not in METHODS:
        raise InputError(f"expected one of {', '.join(METHODS)}", key="method", value=method)
    if method == "kto" and recipe.train.per_device_train_batch_size < 2:
        raise InputError(
            "train.per_device_train_batch_size: KTO needs at least 2 (TRL's KTO "
            "estimates its KL term from the other rows of a batch)"
        )
    cuda = _is_cuda(recipe)
    enabled = use_wandb and recipe.wandb.enabled
    report_to = "wandb" if enabled else "none"
    # The TRL config first: it sets up the distributed state (a PartialState made before it sees
    # one process on every rank of a CPU torchrun) and registers ZeRO-3 before the model loads.
    if method == "sft":
        args = sft_config(recipe, out, cuda, report_to, progress)
    else:
        from scd.train.preference import preference_config

        args = preference_config(recipe, method, out, cuda, report_to, progress)
    _ = args.device
    state = PartialState()
    with state.main_process_first():
        sft_dir = None
        if state.is_main_process:
            sft_dir = prepare_data(recipe, out, method)
            if not recipe.data.sft and progress:
                print(f"{method.upper()} data generated -> {sft_dir}", flush=True)
    sft_dir = sft_dir or data_dir(recipe, out, method)
    manifest = json.loads((sft_dir / "manifest.json").read_text())
    resolved = redact(recipe.to_dict())
    run, id_file, held = None, out / "wandb_run_id", -1  # one W&B run across kills and resumes
    if enabled and state.is_main_process:
        known = (id_file.read_text().strip() or None) if checkpoint and id_file.is_file() else None
        run = start_run(
            project=recipe.wandb.project,
            name=recipe.wandb.run_name or out.name,
            group=recipe.wandb.group,
            entity=recipe.wandb.entity,
            config={
                "recipe": resolved,
                "data_manifest": manifest,
                "protocol": recipe.bias_protocol,
            },
            directory=out,
            job_type="train",
            run_id=known,
        )
        with atomic_file(id_file) as tmp:
            tmp.write_text(run.id + "\n")
        if known:  # what the killed process had not written to W&B: its steps again
            held = held_step(run)
            log_history(run, checkpoint, held)
    earlier = 0  # the tokens of the steps a killed process trained (not timed here)
    if checkpoint and state.is_main_process:
        from scd.progress import say

        saved = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
        earlier = int(saved.get("num_input_tokens_seen") or 0)
        if progress:
            step = saved["global_step"]
            say(f"resuming training from {checkpoint} (step {step}; the steps before it are kept)")
    if method == "sft":
        trainer, checked = build_trainer(
            recipe,
            model_path,
            sft_dir,
            out,
            cuda=cuda,
            progress=progress,
            verbose=verbose,
            args=args,
        )
    else:
        from scd.train.preference import build_preference_trainer

        trainer, checked = build_preference_trainer(
            recipe,
            method,
            model_path,
            sft_dir,
            out,
            cuda=cuda,
            progress=progress,
            verbose=verbose,
            args=args,
        )
    if enabled:  # W&B's step = the training step; none the run holds logged again
        from transformers.integrations import WandbCallback

        trainer.remove_callback(WandbCallback)
        trainer.add_callback(wandb_at_steps(held))
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=checkpoint)  # None unless --resume
    seconds = time.perf_counter() - start
    save_adapter(trainer, out, state.is_main_process)
    info: dict[str, Any] = {}
    if state.is_main_process:
        selected = selection(recipe, trainer.state)
        if selected["step"] != trainer.state.global_step:  # train.select best: an earlier step
            keep_checkpoint(Path(args.output_dir) / f"checkpoint-{selected['step']}", out)
        trainer.processing_class.save_pretrained(str(out))
        tokens = int(trainer.state.num_input_tokens_seen)  # every step, across resumes
        loss = mean_loss(trainer.state.log_history)  # every step, across resumes
        info = {
            "kind": "scd_adapter",
            "scd_version": __version__,
            "method": method,
            "base_model": model_path,
            "model": recipe.model,
            "global_step": trainer.state.global_step,
            "train_loss": result.training_loss if loss is None else loss,
            "train_seconds": round(seconds, 3),
            "tokens_seen": tokens,
            "tokens_per_second": round((tokens - earlier) / seconds, 1)
            if seconds > 0 and tokens > earlier
            else None,
            "resumed_from": Path(checkpoint).name if checkpoint else None,
            "selected": selected,
            "world_size": state.num_processes,
            "token_check_rows": checked,
            "wandb_run_id": run.id if run is not None else None,
            "log_history": [
                {k: e[k] for k in ("step", "loss", "learning_rate", "grad_norm") if k in e}
                for e in trainer.state.log_history
                if "loss" in e
            ],
            "bias_history": [
                {k: e[k] for k in ("step", *BIAS_KEYS) if k in e}
                for e in trainer.state.log_history
                if BIAS_KEYS[0] in e
            ],
        }
        (out / "recipe.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
        write_json(out / "data_manifest.json", manifest)
        write_json(out / "train_manifest.json", info)
        if run is not None:
            skip = ("log_history", "bias_history", "train_loss")
            meta = {k: v for k, v in info.items() if k not in skip}
            run.summary.update({f"scd/{k}": v for k, v in meta.items() if v is not None})
            run.summary["train_loss"] = info["train_loss"]  # every step's (not this process's)
            if recipe.wandb.log_adapter:
                log_adapter(
                    run,
                    out,
                    {
                        **meta,
                        "train_loss": info["train_loss"],
                        "base_model_fingerprint": model_fingerprint(model_path),
                    },
                )
            finish_run(run)
    state.wait_for_everyone()
    return info
