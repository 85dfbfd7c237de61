"""`scd run` end to end on a real instruction-tuned model: SmolLM2-135M-Instruct given as its
GGUF file (converted once), a few dozen prompts, a few LoRA steps, the adapter evaluated."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.slow


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in (path / "records.jsonl").read_text().splitlines()]


def test_scd_run_on_the_smollm2_gguf(smollm2, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SCD_DATA_DIR", smollm2.cache)  # the session's conversion is reused
    recipe = {
        "model": str(smollm2.gguf),
        "data": {"descriptors": "toy", "setting": 1, "max_train": 8, "max_eval": 4},
        "lora": {"r": 8, "alpha": 16},
        "train": {
            "max_steps": 3,
            "batch_size": 4,
            "grad_accum": 1,
            "device": "cpu",
            "bf16": False,
            "gradient_checkpointing": False,
            "warmup_ratio": 0.0,
            "logging_steps": 1,
            "save_steps": 2,
        },
        "eval": {"batch_size": 16, "bias": {"limit": 36}},
        "wandb": {"enabled": False},
    }
    path = tmp_path / "smollm2.yaml"
    path.write_text(yaml.safe_dump(recipe))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scd",
            "run",
            str(path),
            "--outputs",
            str(tmp_path / "outputs"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = tmp_path / "outputs" / "smollm2"
    adapter = run / "setting-1" / "arm-sft" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(smollm2.model)  # the converted directory
    manifest = json.loads((adapter / "train_manifest.json").read_text())
    assert manifest["global_step"] == 3 and manifest["token_check_rows"] > 0

    layout = json.loads((run / "layout.json").read_text())
    base = _records(Path(layout["base"]["bias"]))
    tuned = _records(run / "setting-1" / "arm-sft" / "eval" / "bias")
    assert sum(not r["baseline"] for r in base) == 36
    by_id = {r["prompt_id"]: r for r in base}
    held = [r for r in tuned if not r["baseline"]]
    assert held and all(r["prompt_id"] in by_id for r in held)  # the base subset's held-out part
    for r in tuned:
        assert all(math.isfinite(x) for x in r["option_logprobs"])
        assert sum(r["option_probs"]) == pytest.approx(1.0)
    moved = max(
        abs(a - b)
        for r in held
        for a, b in zip(r["option_logprobs"], by_id[r["prompt_id"]]["option_logprobs"])
    )
    assert moved > 1e-4  # the adapter is applied

    table10 = pd.read_csv(run / "tables" / "table10.csv")
    row = table10[table10["contact"] == "all"].iloc[0]
    assert row["before_n"] == row["after_n"] == len(held)
    assert (run / "report.html").is_file()
