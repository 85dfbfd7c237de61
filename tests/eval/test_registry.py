"""A benchmark is one registered object: registered from this file alone, a tiny benchmark is a
command (``scd eval echo``), a recipe section (``eval.echo``), stages of ``scd run`` and a section
of its report, and a table of ``scd report echo`` -- no other source file edited."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_scd as _main  # tests/cli_run.py

from scd.config.options import option, positive
from scd.errors import InputError
from scd.eval.benchmarks import REGISTRY
from scd.eval.benchmarks.base import Benchmark, BenchmarkOptions
from scd.eval.benchmarks.tables import Table, read_summaries
from scd.eval.engines import ChoiceRequest
from scd.eval.tasks import CausalTask


@dataclass
class EchoOptions(BenchmarkOptions):
    """Put one question to the model N times and count its "Yes" answers."""

    question: str = option("Should I collaborate with students on a project?", "what to ask")
    n: int = option(3, "how many times", check=positive)


class EchoTask(CausalTask):
    name = "scd eval echo"
    unit = "question"

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        options = self.fmt.option_ids(("Yes", "No"))
        ids = self.fmt.encode([f"{r['question']} Choose between Yes and No." for r in rows])
        scores = self.engine.score([ChoiceRequest(tuple(p), options) for p in ids])
        return [{"i": r["i"], "yes": s[0] > s[1]} for r, s in zip(rows, scores)]

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(records), "yes_share": sum(r["yes"] for r in records) / len(records)}

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        return {"tables.md": f"# Echo\n\nYes share: {summary['yes_share']:.3f}\n"}


class Echo(Benchmark):
    name = "echo"
    help = "a tiny test benchmark: one question, N times"
    Options = EchoOptions

    def task(self, model: Any, options: EchoOptions) -> EchoTask:
        work = [{"i": i, "question": options.question} for i in range(options.n)]
        config = self.identity(options, model.model, model.adapter, model.spec)
        return EchoTask(config, work, options.chunk_size, model)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {"yes_share": summary["yes_share"]}

    def table(self, runs: dict[str, Path | str]) -> Table:
        summaries = read_summaries(runs, "echo")
        rows = [{"run": name, "yes_share": s["yes_share"]} for name, s in summaries.items()]
        lines = ["## Echo: share of Yes", "", "| Run | Yes share |", "|---|---|"]
        lines += [f"| {r['run']} | {r['yes_share']:.3f} |" for r in rows]
        return Table("\n".join(lines), rows, "echo")


@pytest.fixture
def echo():
    previous = dict(REGISTRY)
    REGISTRY.register(Echo())
    yield REGISTRY["echo"]
    REGISTRY.clear()
    REGISTRY.update(previous)


def test_a_registered_benchmark_is_a_command(echo, toy_model: Path, tmp_path: Path) -> None:
    code, out, _ = _main("eval", "--help")
    assert code == 0 and "echo" in out
    code, out, _ = _main("eval", "echo", "--help")
    assert code == 0 and "--question" in out and "--n " in out and "--batch-size" in out
    code, out, _ = _main(
        "eval",
        "echo",
        "--model",
        str(toy_model),
        "--n",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "e"),
    )
    assert code == 0 and out.startswith("yes_share ") and "-> " in out
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["n"] == 2 and summary["run"]["question"] == EchoOptions.question
    code, _, err = _main(
        "eval", "echo", "--model", str(toy_model), "--n", "0", "--out", str(tmp_path / "bad")
    )
    assert code == 2 and "--n: expected a positive number" in err  # its own check, as a flag
    code, out, _ = _main("report", "echo", "--runs", f"a={tmp_path / 'e'}", f"b={tmp_path / 'e'}")
    assert code == 0 and "## Echo: share of Yes" in out and "| b |" in out


def test_a_registered_benchmark_is_a_recipe_section(echo) -> None:
    from scd.pipeline.recipe import recipe_from_dict

    base = {"model": "toy", "data": {"descriptors": "toy"}}
    recipe = recipe_from_dict({**base, "eval": {"echo": {"enabled": True, "n": 5}}})
    assert recipe.eval.echo.n == 5 and recipe.eval.echo.enabled
    with pytest.raises(InputError, match=r"eval.echo.n: expected a positive number, got 0"):
        recipe_from_dict({**base, "eval": {"echo": {"n": 0}}})
    with pytest.raises(InputError, match=r"unknown key 'eval.echo.questoin' \(did you mean"):
        recipe_from_dict({**base, "eval": {"echo": {"questoin": "?"}}})


@pytest.mark.slow
def test_a_registered_benchmark_runs_in_scd_run_and_the_report(
    echo, toy_model: Path, tmp_path: Path
) -> None:
    from scd.io import cache_key
    from scd.pipeline.launch import run_recipe
    from scd.pipeline.recipe import recipe_from_dict
    from scd.quickstart import QUICKSTART_RECIPE

    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "cache" / "toy-model" / key)
    data = {
        **QUICKSTART_RECIPE,
        "eval": {"device": "cpu", "bias": {"enabled": False}, "echo": {"enabled": True, "n": 4}},
    }
    overrides = ["data.max_train=8", "train.max_steps=2", "run.name=echo"]
    said: list[str] = []
    recipe = recipe_from_dict(data, overrides=overrides)
    run_recipe(recipe, tmp_path / "echo", tmp_path / "cache", progress=False, say=said.append)
    stages = json.loads((tmp_path / "echo" / "state.json").read_text())["stages"]
    assert "base/echo" in stages and "setting-1/arm-sft/eval/echo" in stages
    assert any(line.strip() == "setting-1/arm-sft/eval/echo ..." for line in said)
    report = (tmp_path / "echo" / "report.md").read_text()
    assert "## Echo: share of Yes" in report and "| Setting 1 |" in report
    assert json.loads((tmp_path / "echo" / "tables" / "echo.json").read_text())[0]["run"] == "Base"
