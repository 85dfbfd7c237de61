"""What a finished training writes beside the trainer's checkpoints: the adapter (checked that it
was written), the kept step's weights under ``train.select: best``, the adapter as a W&B
``model`` artifact with what serving it alone needs, and the training's manifest with the recipe
as it ran."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import yaml

from scd import __version__
from scd.config.schema import Recipe
from scd.config.threads import chosen
from scd.io import write_json
from scd.tracking import redact
from scd.train.arms.base import Method
from scd.train.bias_steps import KEYS as BIAS_KEYS
from scd.train.spec import TrainingSpec

__all__ = [
    "SERVING_FILES",
    "keep_checkpoint",
    "log_adapter",
    "save_adapter",
    "train_manifest",
    "write_training",
]

# what serving the adapter alone needs, by file name prefix: weights, config, tokenizer, template
SERVING_FILES = ("adapter_", "tokenizer", "special_tokens_map", "chat_template")


def keep_checkpoint(checkpoint: Path, out: Path) -> None:
    """The adapter weights of ``checkpoint`` in place of the last step's."""
    weights = checkpoint / "adapter_model.safetensors"
    if not weights.is_file():
        raise RuntimeError(
            f"train.select best: {weights} is missing; the last step's adapter is in {out}"
        )
    shutil.copyfile(weights, out / "adapter_model.safetensors")


def log_adapter(run: Any, out: Path, meta: dict[str, Any]) -> None:
    """The adapter as a W&B ``model`` artifact with what serving it alone needs: its weights and
    config, the tokenizer and chat template, and the base model's id and fingerprint."""
    import wandb

    name = f"adapter-{run.name or out.name}".replace("/", "-")  # e.g. <run>-setting-1
    artifact = wandb.Artifact(name, type="model", metadata=meta)
    for f in sorted(out.iterdir()):
        if f.is_file() and f.name.startswith(SERVING_FILES):
            artifact.add_file(str(f))
    run.log_artifact(artifact)


def save_adapter(trainer: Any, out: Path, main: bool) -> None:
    """Save the adapter (every rank takes part: FSDP and ZeRO-3 gather the weights) and check
    that it was written.

    Under FSDP, ``Trainer.save_model`` writes nothing unless the state dict type is FULL, so a
    sharded set-up (good for checkpoints) is switched to a full state dict for this save.

    Raises:
        RuntimeError: no ``adapter_model.safetensors`` after the save.
    """
    if getattr(trainer, "is_fsdp_enabled", False):
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(str(out))
    trainer.accelerator.wait_for_everyone()
    if main and not (out / "adapter_model.safetensors").is_file():
        raise RuntimeError(
            f"training finished but no adapter was written to {out}/adapter_model.safetensors "
            "(the checkpoints under checkpoints/ hold the trained weights)"
        )


def train_manifest(
    trainer: Any, result: Any, method: Method, spec: TrainingSpec, model_path: str, **info: Any
) -> dict[str, Any]:
    """``train_manifest.json``: what the training did, every step across resumes."""
    state = trainer.state
    tokens = int(state.num_input_tokens_seen)  # every step, across resumes
    loss = info.pop("loss")  # the training loss (scd.train.training_log.mean_loss)
    seconds, earlier = info.pop("seconds"), info.pop("earlier")
    return {
        "kind": "scd_adapter",
        "scd_version": __version__,
        "method": method.name,
        "base_model": model_path,
        "model": spec.model,
        "global_step": state.global_step,
        "train_loss": result.training_loss if loss is None else loss,
        "train_seconds": round(seconds, 3),
        "tokens_seen": tokens,
        "tokens_per_second": round((tokens - earlier) / seconds, 1)
        if seconds > 0 and tokens > earlier
        else None,
        "resumed_from": info.pop("resumed_from"),
        "selected": info.pop("selected"),
        "world_size": info.pop("world_size"),
        "token_check_rows": info.pop("checked"),
        "wandb_run_id": info.pop("wandb_run_id"),
        "log_history": [
            {k: e[k] for k in ("step", "loss", "learning_rate", "grad_norm") if k in e}
            for e in state.log_history
            if "loss" in e
        ],
        "bias_history": [
            {k: e[k] for k in ("step", *BIAS_KEYS) if k in e}
            for e in state.log_history
            if BIAS_KEYS[0] in e
        ],
    }


RAN_KEYS = ("optim", "bf16", "gradient_checkpointing")  # what scd changes on a CPU


def ran_settings(args: Any) -> dict[str, Any]:
    """The optimizer, precision and checkpointing TRL's config ``args`` holds (on a CPU, not
    the recipe's CUDA ones), and whether its batches were padding-free."""
    ran = {key: getattr(getattr(args, key), "value", getattr(args, key)) for key in RAN_KEYS}
    return {**ran, "padding_free": bool(getattr(args, "padding_free", False))}


def as_ran(recipe: Recipe, args: Any) -> Recipe:
    """The recipe as the training runs it: its ``train`` keys as TRL got them."""
    return dataclasses.replace(
        recipe, train=dataclasses.replace(recipe.train, **ran_settings(args))
    )


def write_training(
    out: Path, recipe: Recipe, data_manifest: dict[str, Any], info: dict[str, Any], args: Any
) -> None:
    """What a finished training writes beside its adapter: the resolved recipe as it ran
    (secrets redacted; a CPU run's optimizer, precision and checkpointing as TRL got them), its
    data's manifest and its own."""
    threads = chosen()  # torch's threads (scd.config.threads): recorded, not a recipe key
    info["ran"] = {**ran_settings(args), **({"threads": threads} if threads else {})}
    resolved = redact(as_ran(recipe, args).to_dict())
    (out / "recipe.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    write_json(out / "data_manifest.json", data_manifest)
    write_json(out / "train_manifest.json", info)
