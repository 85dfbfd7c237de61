"""A run is a plan of typed jobs that launchers execute: what the plan holds with and without
the arena's arms, and a launcher of a test's own (one class) running it to the local launcher's
tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scd.io import cache_key
from scd.pipeline.jobs import CapabilityJob, DataJob, EvalJob, PushJob, TrainJob
from scd.pipeline.launch import run_recipe
from scd.pipeline.plan import Plan
from scd.pipeline.recipe import recipe_from_dict
from scd.pipeline.run import Run
from scd.quickstart import QUICKSTART_RECIPE
from scd.train.arms.untrained import DEBIAS_PROMPT

SMALL = {
    **QUICKSTART_RECIPE,
    "data": {**QUICKSTART_RECIPE["data"], "max_train": 40, "max_eval": 10},
    "train": {**QUICKSTART_RECIPE["train"], "max_steps": 4},
    "eval": {"bias": {"enabled": True, "limit": 200}},
    "wandb": {"enabled": False},
}


def _cache(root: Path, toy_model: Path) -> Path:
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, root / "cache" / "toy-model" / key)
    return root / "cache"


def _plan(recipe: dict, tmp_path: Path, toy_model: Path) -> tuple[Run, Plan]:
    run = Run(
        recipe_from_dict(recipe, "test"),
        tmp_path / "run",
        _cache(tmp_path, toy_model),
        progress=False,
        say=lambda _: None,
    )
    run.prepare()
    return run, run.plan()


def test_without_arms_the_plan_is_the_papers_before_and_after(tmp_path, toy_model) -> None:
    from scd.pipeline.run_interface import JobRunner, PlanSource

    recipe = {**SMALL, "run": {"name": "p", "settings": [1, 3]}}
    run, plan = _plan(recipe, tmp_path, toy_model)
    assert isinstance(run, PlanSource) and isinstance(run, JobRunner)  # what plan and jobs use
    assert not plan.arena and [t.name for t in plan.tasks] == ["base", "setting 1", "setting 3"]
    assert plan.stages() == [
        "setting-1/sft",
        "setting-3/sft",
        "base/bias",
        "setting-1/arm-sft/train",
        "setting-1/arm-sft/eval/bias",
        "setting-3/arm-sft/train",
        "setting-3/arm-sft/eval/bias",
    ]
    assert not any(isinstance(j, CapabilityJob) for t in plan.tasks for j in t.jobs)
    assert [a.arm for a in plan.arms] == ["base", "sft", "sft"]
    one = {**SMALL, "train": {**SMALL["train"], "push_to_hub": True, "hub_model_id": "me/a"}}
    _, single = _plan(one, tmp_path / "one", toy_model)
    assert single.stages()[-1] == "setting-1/arm-sft/push"  # after the setting's evaluations
    (push,) = [j for t in single.tasks for j in t.jobs if isinstance(j, PushJob)]
    assert push.repo == "me/a" and [name for name, _ in push.before] == ["bias"]


def test_each_adapter_of_a_sweep_or_arena_has_a_repository_of_its_own(tmp_path, toy_model):
    train = {**SMALL["train"], "push_to_hub": True, "hub_model_id": "me/a"}
    recipe = {**SMALL, "train": train, "arms": ["dpo", "prompt"], "run": {"settings": [1, 3]}}
    _, plan = _plan(recipe, tmp_path, toy_model)
    repos = [j.repo for t in plan.tasks for j in t.jobs if isinstance(j, PushJob)]
    assert repos == ["me/a-setting-1-dpo", "me/a-setting-3-dpo"]  # the prompt arm: no adapter


def test_an_arena_plan_gives_every_arm_its_jobs_on_the_same_items(tmp_path, toy_model) -> None:
    recipe = {
        **SMALL,
        "arms": ["dpo", "prompt", "general"],
        "data": {**SMALL["data"], "general": "scd:general"},
    }
    run, plan = _plan(recipe, tmp_path, toy_model)
    assert plan.arena and [a.arm for a in plan.arms] == ["base", "dpo", "prompt", "general"]
    assert [type(j) for j in plan.data] == [DataJob] * 3
    assert [j.stage for j in plan.data] == [
        "setting-1/sft",
        "setting-1/arm-dpo/data",
        "setting-1/arm-general/data",
    ]
    tasks = {t.name: t for t in plan.tasks}
    assert set(tasks) == {"base", "setting 1 dpo", "setting 1 prompt", "setting 1 general"}
    dpo = tasks["setting 1 dpo"].jobs
    assert [type(j) for j in dpo] == [TrainJob, EvalJob, CapabilityJob]
    assert dpo[0].method == "dpo" and [j.phase for j in dpo] == ["own_model", "engine", "own_model"]
    assert tasks["setting 1 general"].jobs[0].method == "sft"  # the control: SFT, other rows
    prompt = [j for j in tasks["setting 1 prompt"].jobs if isinstance(j, EvalJob)]
    assert prompt[0].system_prompt == DEBIAS_PROMPT and prompt[0].adapter is None
    held = {j.options.prompts for t in plan.tasks[1:] for j in t.jobs if isinstance(j, EvalJob)}
    assert held == {str(run.dir / "setting-1" / "sft" / "heldout")}  # every arm, same items
    base = [j for j in tasks["base"].jobs if isinstance(j, EvalJob)]
    assert base[0].cached and base[0].out.parent == tmp_path / "cache" / "base"


class Reversed:
    """A launcher of the test's own: the data, then the tasks last to first, each in turn."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def execute(self, run: Run, plan: Plan) -> None:
        for job in plan.data:
            run.execute(job)
        for task in reversed(plan.tasks):
            self.order.append(task.name)
            for job in task.jobs:
                run.execute(job)


@pytest.mark.slow
def test_a_launcher_is_one_class(tmp_path, toy_model) -> None:
    recipe = recipe_from_dict({**SMALL, "run": {"name": "p", "settings": [1, 3]}}, "test")
    tables = {}
    for name, launcher in (("local", "local"), ("reversed", Reversed())):
        root = tmp_path / name
        run_recipe(
            recipe,
            root / "p",
            _cache(root, toy_model),
            progress=False,
            say=lambda _: None,
            launcher=launcher,
        )
        tables[name] = (root / "p" / "tables" / "table10.csv").read_text()
    assert launcher.order == ["setting 3", "setting 1", "base"]
    assert tables["reversed"] == tables["local"]


@pytest.mark.slow
def test_a_source_split_arena_compares_with_the_base_model_on_the_second_prompt_set(
    tmp_path, toy_model
) -> None:
    """Setting 2 holds out prompts of the second prompt set (the stigma conditions): its arms
    are paired with the base model's evaluation of those, not of the first set."""
    import pandas as pd

    recipe = recipe_from_dict(
        {**SMALL, "arms": ["sft"], "run": {"name": "s2"}, "data": {**SMALL["data"], "setting": 2}},
        "test",
    )
    run_recipe(
        recipe, tmp_path / "s2", _cache(tmp_path, toy_model), progress=False, say=lambda _: None
    )
    table = pd.read_csv(tmp_path / "s2" / "tables" / "arena.csv").set_index("arm")
    assert table.loc["base", "bias_n"] == table.loc["sft", "bias_n"] > 0  # the same prompts
    assert table.loc["base", "bias_p"] == 1.0 and pd.notna(table.loc["base", "bias_pct"])
    assert (tmp_path / "s2" / "figures" / "arena.png").is_file()


def test_a_toy_run_gives_the_toy_the_words_its_benchmarks_options_need(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[tuple] = []
    monkeypatch.setattr(
        "scd.models.toy.ensure_toy_model", lambda *a, **k: built.append(a) or tmp_path
    )
    winobias = {"enabled": True, "data": str(shared_data / "winobias")}
    for evals in ({"bias": {"enabled": True}}, {"bias": {"enabled": True}, "winobias": winobias}):
        recipe = recipe_from_dict({**SMALL, "eval": evals}, "test")
        Run(recipe, tmp_path / "run", tmp_path / "cache", say=lambda _: None).build_model()
    plain, words = (call[-1] for call in built)
    assert plain == [] and len(words) == 40 and {"developer", "cook"} <= set(words)
