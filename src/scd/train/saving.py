"""What a finished training writes beside the trainer's checkpoints: the adapter (checked that it
was written), the kept step's weights under ``train.select: best``, and the adapter as a W&B
``model`` artifact with what serving it alone needs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

__all__ = ["SERVING_FILES", "keep_checkpoint", "log_adapter", "save_adapter"]

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
