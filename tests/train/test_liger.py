"""``train.use_liger_kernel`` (TRL's key: Liger Kernel's fused layers): refused in one line
where it cannot train, before any work, instead of transformers' traceback mid-training."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from scd.config.checks import liger_problem
from scd.pipeline.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"
MISSING = (
    "train.use_liger_kernel: the liger-kernel package is not installed (pip install liger-kernel)"
)
ON_CPU = (
    "train.use_liger_kernel: Liger Kernel's kernels run on a CUDA GPU and this run trains on "
    "the CPU; set it false"
)


def _recipe(device: str = "auto", liger: bool = False):
    """The quickstart recipe on ``device``, asking for Liger or not (set after loading: the
    loader would refuse it here, without the package)."""
    recipe = load_recipe(QUICKSTART, [f"train.device={device}"])
    trl = {"use_liger_kernel": True} if liger else {}
    return dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, trl=trl))


def test_each_reason_and_none_where_it_can_train(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _recipe(liger=True)
    assert liger_problem(_recipe()) is None  # not asked for: nothing to refuse
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert liger_problem(asked, cuda=True) == MISSING
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # installed
    assert liger_problem(asked, cuda=True) is None
    assert liger_problem(asked, cuda=False) == ON_CPU
    assert liger_problem(asked) is None  # device auto, not known yet: the trainer decides
    on_cpu = _recipe("cpu", liger=True)
    assert liger_problem(on_cpu) == ON_CPU  # said by the recipe itself


def test_scd_train_refuses_it_in_one_line_and_writes_nothing(
    toy_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "scd", "train", str(QUICKSTART)]  # quickstart: device cpu
    cmd += ["--set", f"model={toy_model}", "--set", f"output_dir={out}"]
    done = subprocess.run(
        [*cmd, "--set", "train.use_liger_kernel=true"], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    installed = importlib.util.find_spec("liger_kernel") is not None
    assert line.endswith(ON_CPU if installed else MISSING), line
    assert not out.exists()
