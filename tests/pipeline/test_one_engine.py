"""``scd run`` loads its evaluation engine once: the base model and every setting's adapter are
evaluated on one engine -- on vLLM (the recording fake ``LLM`` of tests/eval/fake_vllm.py) one
``LLM`` with a ``LoRARequest`` per adapter."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from scd.io import cache_key
from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict
from scd.quickstart import QUICKSTART_RECIPE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))
import fake_vllm  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_sweep_on_vllm_loads_one_llm(toy_model: Path, tmp_path: Path, monkeypatch) -> None:
    fake = fake_vllm.install(monkeypatch)
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "cache" / "toy-model" / key)
    data = {
        **QUICKSTART_RECIPE,
        "data": {**QUICKSTART_RECIPE["data"], "max_train": 150, "max_eval": 20},
        "eval": {"backend": "vllm", "bias": {"enabled": True, "limit": 240}},
        "run": {"name": "sweep", "settings": [1, 3]},
    }
    run_recipe(
        recipe_from_dict(data, "test"),
        tmp_path / "sweep",
        tmp_path / "cache",
        progress=False,
        say=lambda _: None,
    )
    assert len(fake.instances) == 1  # one LLM for the base model and both adapters
    llm = fake.instances[0]
    assert llm.kwargs["enable_lora"] and llm.kwargs["max_lora_rank"] == 8
    assert llm.kwargs["max_model_len"] == 256
    routes = {
        (r.lora.lora_int_id, Path(r.lora.lora_path).parent.parent.name) if r.lora else None
        for r in llm.requests
    }
    assert routes == {None, (1, "setting-1"), (2, "setting-3")}
    assert all(r.params.prompt_logprobs is None for r in llm.requests)
    table = pd.read_csv(tmp_path / "sweep" / "tables" / "table10.csv")
    overall = table[table.contact == "all"].set_index("setting")
    assert set(overall.index) == {1, 3}
    assert overall.after_pct[1] < overall.before_pct[1], overall  # setting 1's adapter applied
