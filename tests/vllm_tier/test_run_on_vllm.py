"""``scd run`` end to end with ``eval.backend: vllm`` on SmolLM2-135M-Instruct -- one setting, a
few training steps, a few dozen contact prompts, BBQ and the SDS probe on a few items -- gives
the tables of the same recipe on the transformers backend; so does ``eval.backend: openai``
against a real ``vllm serve`` of the model, which loads the run's tuned adapter at run time."""

from __future__ import annotations

import pandas as pd
from conftest import TOLERANCE  # tests/vllm/conftest.py

from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict


def _recipe(model: str, bbq: str, backend: str, server=None) -> dict:
    engine = {"kv_cache_space": 1.0} if backend == "vllm" else {"device": "cpu"}
    if backend == "openai":
        engine = {"base_url": server.url, "api_key_env": server.key_env}
    return {
        "model": model,
        "data": {"descriptors": "toy", "setting": 1, "max_train": 8, "max_eval": 4},
        "lora": {"r": 8, "alpha": 16, "dropout": 0.0},
        "train": {
            "max_steps": 2,
            "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 1,
            "device": "cpu",
            "bf16": False,
            "gradient_checkpointing": False,
            "save_steps": 10,
        },
        "eval": {
            "backend": backend,
            "dtype": "float32",
            **engine,
            "bias": {"limit": 30},
            "bbq": {"enabled": True, "data": bbq, "limit": 12},
            "sds": {"enabled": True, "limit_conditions": 1},
        },
        "wandb": {"enabled": False},
        "run": {"name": backend},
    }


def test_scd_run_on_vllm_gives_the_tables_of_transformers(
    smol, shared_data, tmp_path, vllm_server
) -> None:
    bbq = str(shared_data / "bbq" / "data")
    for backend in ("hf", "vllm", "openai"):
        recipe = recipe_from_dict(_recipe(smol, bbq, backend, vllm_server))
        run_recipe(recipe, tmp_path / backend, tmp_path / "cache", progress=False, say=print)
    hf = tmp_path / "hf"
    adapter = "setting-1/arm-sft/adapter/adapter_model.safetensors"
    for vl in (tmp_path / "vllm", tmp_path / "openai"):
        assert (hf / adapter).read_bytes() == (vl / adapter).read_bytes()  # the same tuned model
        for name in ("table10", "table1", "table15"):  # from the answers: equal
            pd.testing.assert_frame_equal(
                pd.read_csv(hf / f"tables/{name}.csv"), pd.read_csv(vl / f"tables/{name}.csv")
            )
        a, b = (pd.read_csv(d / "tables/stigma-sds.csv") for d in (hf, vl))  # P(Unlikely)
        pd.testing.assert_frame_equal(a, b, check_exact=False, atol=TOLERANCE, rtol=0)
    assert "| Engine | vllm, dtype float32" in (tmp_path / "vllm/report.md").read_text()
    served = (tmp_path / "openai/report.md").read_text()
    assert f"| Engine | openai: `the one model` served at {vllm_server.url}" in served
    for path in (tmp_path / "openai").rglob("*"):
        if path.is_file():
            assert vllm_server.key.encode() not in path.read_bytes(), path
