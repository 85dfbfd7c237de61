"""docs/ARCHITECTURE.md's "Add a benchmark" is enough: its example, run as written from the docs
alone (registered out of tree), runs through `scd eval` and as columns of an arena run."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from scd.cli import main
from scd.data_gen.contact import read_prompts, user_text
from scd.eval.benchmarks import REGISTRY

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _example(tmp_path: Path) -> Path:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    block = re.search(r"<!-- example: benchmark -->\n```python\n(.*?)```", text, re.S)
    assert block, "the example block of 'Add a benchmark'"
    path = tmp_path / "option_pairs_benchmark.py"
    path.write_text(block.group(1))
    return path


def _items(toy_prompts: Path, path: Path) -> Path:
    rows = read_prompts(toy_prompts).to_pylist()[::50][:60]
    with path.open("w") as f:
        for r in rows:
            item = {
                "id": r["prompt_id"],
                "question": user_text(r),
                "options": r["options"],
                "stereotyped": r["biased_answer"],
            }
            f.write(json.dumps(item) + "\n")
    return path


def test_the_documented_benchmark_runs_in_scd_eval_and_the_arena(
    toy_model: Path, toy_prompts: Path, tmp_path: Path, monkeypatch
) -> None:
    spec = importlib.util.spec_from_file_location("option_pairs_benchmark", _example(tmp_path))
    module = importlib.util.module_from_spec(spec)
    sys.modules["option_pairs_benchmark"] = module
    try:
        spec.loader.exec_module(module)  # registers it, as a plug-in's import would
        assert "option_pairs" in REGISTRY
        data = _items(toy_prompts, tmp_path / "items.jsonl")
        out = tmp_path / "eval"
        args = ["eval", "option_pairs", "--model", str(toy_model), "--data", str(data)]
        assert main([*args, "--out", str(out)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["overall"]["n"] == 60 and 0 <= summary["overall"]["pct"] <= 100
        assert (
            main([*args[:-1], str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x")]) == 2
        )

        from scd.io import cache_key
        from scd.pipeline.launch import run_recipe
        from scd.pipeline.recipe import load_recipe

        key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
        cache = tmp_path / "outputs" / "cache"
        (cache / "toy-model").mkdir(parents=True)
        (cache / "toy-model" / key).symlink_to(toy_model, target_is_directory=True)
        recipe = load_recipe(
            REPO / "recipes" / "arena-quickstart.yaml",
            [
                "arms=[base,sft]",
                "train.num_train_epochs=1",
                "eval.sds.enabled=false",
                "eval.option_pairs.enabled=true",
                f"eval.option_pairs.data={data}",
            ],
        )
        run_recipe(recipe, tmp_path / "outputs" / "run", cache, progress=False, say=lambda _: None)
        table = pd.read_csv(tmp_path / "outputs" / "run" / "tables" / "arena.csv").set_index("arm")
        assert table["option_pairs_pct"].notna().all() and table["option_pairs_n"].eq(60).all()
        assert 0 < table.loc["sft", "option_pairs_p_holm"] <= 1
        report = (tmp_path / "outputs" / "run" / "report.md").read_text()
        assert "Option pairs % [95% CI]" in report and "## Option pairs" in report
    finally:
        REGISTRY.pop("option_pairs", None)
        sys.modules.pop("option_pairs_benchmark", None)
