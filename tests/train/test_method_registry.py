"""A training method is one registered class: ORPO (TRL's experimental ORPOTrainer, no reference
model), defined in this file alone on top of DPO's rows, trains as an arm of ``scd run`` on the
planted-bias toy model and is a row of the arena with every column the other arms have -- no
other source file edited. A method or arm name nobody registered is one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_scd  # tests/cli_run.py

from scd.errors import InputError
from scd.io import cache_key
from scd.train.arms import METHODS
from scd.train.arms.dpo import DPO

REPO = Path(__file__).resolve().parents[2]


class ORPO(DPO):
    """ORPO on DPO's pairs (chosen: the unbiased answer, rejected: the biased one)."""

    name = "orpo"
    help = (
        "LoRA ORPO on the same pairs as DPO (odds-ratio penalty, no reference model; "
        "arena.beta: the odds-ratio weight)"
    )
    config_class = "trl.experimental.orpo:ORPOConfig"
    trainer_class = "trl.experimental.orpo:ORPOTrainer"

    def check_tokens(
        self, dataset: Any, rows: list[dict[str, Any]], formatter: Any, spec: Any
    ) -> int:
        """ORPO's tokenized rows hold the prompt, and prompt + answer for each reply."""
        for i, row in enumerate(rows[: self.check_sample]):
            user = next(m["content"] for m in row["prompt"] if m["role"] == "user")
            prompt = formatter.encode([user])[0]
            done = dataset[i]
            for key, answer in (("chosen", "answer"), ("rejected", "rejected_answer")):
                full, want = list(done[f"{key}_input_ids"]), list(formatter.reply_ids(row[answer]))
                if done["prompt_input_ids"] != prompt or full[len(prompt) :][: len(want)] != want:
                    raise InputError(f"row {row['prompt_id']}: ORPO's {key} tokens differ")
        return min(self.check_sample, len(rows))


@pytest.fixture
def orpo():
    """ORPO registered for the test; the registry as it was afterwards (a built-in ORPO, were
    there one, comes back)."""
    before = METHODS.get("orpo")
    METHODS.register(ORPO)
    yield ORPO
    if before is None:
        METHODS.pop("orpo")
    else:
        METHODS["orpo"] = before


@pytest.mark.slow
def test_a_method_from_one_file_trains_and_is_an_arena_row(
    orpo, toy_model: Path, tmp_path: Path
) -> None:
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "cache" / "toy-model" / key)
    recipe = str(REPO / "recipes" / "arena-quickstart.yaml")
    code, out, err = run_scd(
        "run", recipe, "--outputs", str(tmp_path), "--run-id", "orpo", "--set", "arms=[base, orpo]"
    )
    assert code == 0, err[-3000:]
    run = tmp_path / "orpo"
    manifest = json.loads((run / "setting-1/arm-orpo/adapter/train_manifest.json").read_text())
    assert manifest["method"] == "orpo" and manifest["token_check_rows"] > 0
    rows = json.loads((run / "tables/arena.json").read_text())
    base, tuned = (next(r for r in rows if r["arm"] == arm) for arm in ("base", "orpo"))
    assert tuned["what"] == ORPO.help
    filled = {k for k, v in base.items() if v is not None} - {"bias_p_holm"}
    assert filled - {k for k, v in tuned.items() if v is not None} == set()  # every column
    assert tuned["bias_p"] is not None and tuned["kl_mean"] > 0
    table = (run / "tables/arena.md").read_text()
    assert "| 1 | orpo |" in table and "- **SDS gap [95% CI]**:" in table


def test_an_unregistered_method_or_arm_is_one_line(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: toy\noutput_dir: {tmp_path / 'out'}\ndata:\n  descriptors: toy\n")
    code, _, err = run_scd("train", str(recipe), "--method", "orpo")
    assert code == 2 and "--method" in err and "orpo" in err and "\n" not in err.strip()
    runs = tmp_path / "runs"
    code, _, err = run_scd("run", str(recipe), "--outputs", str(runs), "--set", "arms=[base, orpo]")
    assert code == 2 and "arms[1]: unknown arm 'orpo'" in err
    assert not (tmp_path / "out").exists() and not runs.exists()
