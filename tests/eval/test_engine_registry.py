"""An engine is one registered class: defined in this file alone with its options beside it, a
tiny engine is a ``--backend`` of the commands whose models it runs (its flags in a group of
their own), a recipe's ``eval.backend`` (its keys checked as its own) and the engine of an
evaluation, its pinned options in the result -- no other source file edited."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from cli_run import run_scd as _main  # tests/cli_run.py

from scd.config.engine import EngineSpec
from scd.config.options import option, positive
from scd.errors import InputError
from scd.eval.engines import ENGINES


@dataclass
class FixedOptions(EngineSpec):
    """Always the same answer."""

    prefer: Literal["first", "last"] = option("first", "the option it always chooses")
    pace: int | None = option(None, "requests per call (speed only)", check=positive, speed=True)


class FixedEngine:
    """Chooses the first (or last) option of every question."""

    name = "fixed"
    Options = FixedOptions
    model_kinds = ("causal",)
    help = "a test engine that always chooses the same option"
    requests = 0

    def __init__(
        self, model: str, spec: FixedOptions, *, tokenizer: Any = None, adapters: Sequence = ()
    ) -> None:
        self.spec = spec

    def score(self, requests: list) -> list[list[float]]:
        FixedEngine.requests += len(requests)
        win = 0 if self.spec.prefer == "first" else -1
        return [
            [0.0 if i == range(len(r.option_ids))[win] else -5.0 for i in range(len(r.option_ids))]
            for r in requests
        ]

    def generate(self, prompt_ids: list, max_new_tokens: int, *, messages: Any = None) -> list:
        return ["" for _ in prompt_ids]

    def use_adapter(self, adapter: str | None) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def fixed():
    previous = dict(ENGINES)
    ENGINES.register(FixedEngine)
    yield FixedEngine
    ENGINES.clear()
    ENGINES.update(previous)


def test_a_registered_engine_is_a_backend_of_the_commands(fixed) -> None:
    code, out, _ = _main("eval", "bias", "--help")
    assert code == 0 and "{hf,vllm,openai,fixed}" in out
    assert "fixed engine (--backend fixed):" in out and "--prefer {first,last}" in out
    assert "vllm engine (--backend vllm):" in out and "--max-model-len" in out
    code, out, _ = _main("eval", "mlm", "--help")  # a masked LM runs on hf alone
    assert code == 0 and "--backend {hf}" in out and "--batch-size" in out
    for other in ("fixed", "--prefer", "--max-model-len", "--base-url", "openai"):
        assert other not in out, other


def test_a_registered_engine_evaluates(fixed, toy_model: Path, toy_prompts: Path, tmp_path) -> None:
    common = ["eval", "bias", "--model", str(toy_model), "--prompts", str(toy_prompts)]
    runs = {}
    for prefer in ("first", "last"):
        out = tmp_path / prefer
        code, _, err = _main(
            *common,
            "--limit",
            "20",
            "--backend",
            "fixed",
            "--prefer",
            prefer,
            "--pace",
            "3",
            "--out",
            str(out),
        )
        assert code == 0, err
        runs[prefer] = json.loads((out / "summary.json").read_text())
        assert runs[prefer]["run"]["backend"] == "fixed"
        assert runs[prefer]["run"]["prefer"] == prefer  # pinned with the result
        assert "pace" not in runs[prefer]["run"]  # a speed option is not
    assert fixed.requests > 0
    assert runs["first"]["n_records"] == runs["last"]["n_records"] > 0
    chosen = {}
    for prefer in runs:
        lines = (tmp_path / prefer / "records.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        win = 0 if prefer == "first" else -1
        assert all(r["chosen"] == r["options"][win] for r in records)  # the engine's answers
        chosen[prefer] = [r["chosen"] for r in records]
    assert chosen["first"] != chosen["last"]
    code, _, err = _main(
        *common, "--backend", "fixed", "--batch-size", "4", "--out", str(tmp_path / "bad")
    )
    assert code == 2 and "--batch-size 4: an option of the hf backend, not of fixed" in err
    assert not (tmp_path / "bad").exists()


def test_a_registered_engine_is_a_recipe_backend(fixed) -> None:
    from scd.config.loader import fixed_part
    from scd.pipeline.recipe import recipe_from_dict

    base = {"model": "toy", "data": {"descriptors": "toy"}}
    recipe = recipe_from_dict({**base, "eval": {"backend": "fixed", "prefer": "last", "pace": 2}})
    engine = recipe.eval.to_engine_spec()
    assert isinstance(engine, FixedOptions) and engine.prefer == "last"
    assert engine.identity() == {
        "backend": "fixed",
        "dtype": "auto",
        "system_prompt": None,
        "prefer": "last",
    }
    kept = fixed_part(recipe.to_dict())["eval"]
    assert kept["prefer"] == "last" and "pace" not in kept  # resumable with another pace
    with pytest.raises(InputError, match="eval.batch_size: an option of the hf backend, not of"):
        recipe_from_dict({**base, "eval": {"backend": "fixed", "batch_size": 3}})
    with pytest.raises(InputError, match=r"unknown key 'eval.prefre' \(did you mean 'eval.prefer'"):
        recipe_from_dict({**base, "eval": {"backend": "fixed", "prefre": "last"}})
    with pytest.raises(InputError, match="eval.prefer: expected first or last, got 'middle'"):
        recipe_from_dict({**base, "eval": {"backend": "fixed", "prefer": "middle"}})
