"""What a training run needs before any work (:func:`check_run`): the recipe, method and output
directory checked, the model resolved to a loadable path, the checkpoint to resume from
(:func:`last_checkpoint`) and whether it trains on a CUDA GPU.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from scd.config.checks import liger_problem
from scd.config.schema import Recipe, TrainSpec
from scd.errors import InputError
from scd.train.arms import padding_free_problem
from scd.train.arms.base import Method
from scd.train.spec import TrainingSpec

__all__ = ["check_run", "last_checkpoint"]


def _is_cuda(train: TrainSpec) -> bool:
    import torch

    if train.device == "cpu":
        return False
    if train.device == "cuda" and not torch.cuda.is_available():
        raise InputError("train.device: cuda was asked for but no CUDA GPU is available")
    return torch.cuda.is_available()


def last_checkpoint(out: Path) -> str | None:
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


def check_run(
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
    checkpoint = last_checkpoint(out)
    if checkpoint and not resume:
        raise InputError(
            f"output_dir {out}: holds checkpoints; pass --resume to continue, "
            "or choose a new output_dir"
        )
    return spec, model_path, checkpoint, cuda
