"""``scd run`` through a served model (``eval.backend: openai``) against the stub server of
tests/eval: the base model and the run's own tuned adapter (loaded into the server at run time)
are evaluated there, W&B logs offline, and the planted API key reaches the server in every
request and no file, log, W&B record or printed line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))
from served_stub import StubServer  # noqa: E402  # tests/eval/served_stub.py

from scd.pipeline.launch import run_recipe  # noqa: E402
from scd.pipeline.recipe import recipe_from_dict  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-planted-run-5b0e9c1d2a"


@pytest.mark.slow
def test_scd_run_through_a_served_model_keeps_the_key_secret(
    toy_model, tmp_path, monkeypatch, capfd
) -> None:
    monkeypatch.setenv("MY_SERVER_KEY", KEY)
    monkeypatch.setenv("WANDB_MODE", "offline")
    recipe = yaml.safe_load((REPO / "recipes" / "quickstart.yaml").read_text())
    recipe["model"] = str(toy_model)
    recipe["data"].update(max_train=40, max_eval=10)
    recipe["wandb"]["enabled"] = True
    with StubServer(toy_model, api_key=KEY, load_adapters=True) as stub:
        recipe["eval"] = {
            "backend": "openai",
            "base_url": stub.url,
            "api_key_env": "MY_SERVER_KEY",
            "bias": {"limit": 60},
        }
        report = run_recipe(
            recipe_from_dict(recipe),
            tmp_path / "run",
            tmp_path / "cache",
            progress=False,
            say=print,
        )
    models = {b["model"] for b in stub.bodies}
    assert "stub" in models and any(m.startswith("scd-") for m in models)  # base, then adapter
    assert set(stub.headers) == {f"Bearer {KEY}"}
    engine = f"| Engine | openai: `the one model` served at {stub.url}"
    assert engine in (report.parent / "report.md").read_text()
    printed = capfd.readouterr()
    assert KEY not in printed.out + printed.err
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any("wandb" in p.parts for p in written)  # W&B wrote its offline run
    for path in written:
        assert KEY.encode() not in path.read_bytes(), path
