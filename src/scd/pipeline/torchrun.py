"""Training under ``torchrun``: one process per GPU of a task, each running ``scd train``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scd.config.schema import Recipe

__all__ = ["torchrun_train"]


def torchrun_train(
    recipe: Recipe, processes: int, resume: bool, where: Path, method: str = "sft"
) -> None:
    """``scd train`` under ``torchrun``, one process per GPU, on the arm's recipe."""
    import subprocess
    import sys

    import yaml

    path = where / "train_recipe.yaml"
    path.write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "scd",
        "train",
        str(path),
        "--method",
        method,
    ]
    done = subprocess.run([*cmd, *(["--resume"] if resume else [])], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"training under torchrun failed (exit {done.returncode}): {path}")
