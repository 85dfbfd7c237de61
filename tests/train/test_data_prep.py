"""One data-preparation path for `scd train` and `scd run`, driven by the settings table.

A setting whose split is ``source`` gets a second prompt set whatever its number, and a custom
settings file (``data.settings_file``) replaces the packaged one everywhere a recipe is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from scd.cli import main
from scd.config.settings import settings_path
from scd.errors import InputError
from scd.pipeline.recipe import load_recipe

EVAL_NAMES = ("Buddhist", "Sikh")  # the second prompt set: not among the toy descriptors


@pytest.fixture
def custom(tmp_path: Path) -> dict[str, Path]:
    """The packaged settings renumbered 11-18 (12 splits by source), plus 2: a random split;
    a tiny descriptor list for the second prompt set."""
    packaged = yaml.safe_load(settings_path().read_text())
    table = {n + 10: spec for n, spec in packaged.items()} | {2: packaged[1]}
    settings = tmp_path / "my-settings.yaml"
    settings.write_text(yaml.safe_dump(table))
    names = tmp_path / "eval-descriptors.json"
    names.write_text(json.dumps({"religion": {"toy": list(EVAL_NAMES)}}))
    return {"settings": settings, "eval_descriptors": names}


def _recipe(tmp_path: Path, custom: dict[str, Path], *extra: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(
        "model: toy\noutput_dir: out\n"
        f"data: {{descriptors: toy, eval_descriptors: {custom['eval_descriptors']}, "
        f"settings_file: {custom['settings']}, max_train: 20, max_eval: 5}}\n"
    )
    return load_recipe(path, list(extra))


def _manifest(sft: Path) -> dict:
    return json.loads((sft / "manifest.json").read_text())


def test_scd_train_takes_the_source_split_from_the_settings_file(tmp_path, custom) -> None:
    from scd.train.sft_rows import prepare_data
    from scd.train.spec import TrainingSpec

    out = tmp_path / "s12"
    sft = prepare_data(TrainingSpec.of(_recipe(tmp_path, custom, "data.setting=12")), out)
    info = _manifest(sft)
    assert (info["setting"], info["split"]) == (12, "source")
    assert set(info["sources_sha256"]) == {"prompts", "eval_prompts"}
    held = pq.read_table(sft / "heldout" / "prompts.parquet")
    assert set(held["descriptor"].to_pylist()) == set(EVAL_NAMES)
    assert (out / "data" / "eval_prompts" / "prompts.parquet").is_file()

    out = tmp_path / "s2"  # setting 2 of this file is a random split: no second prompt set
    sft = prepare_data(TrainingSpec.of(_recipe(tmp_path, custom, "data.setting=2")), out)
    assert (_manifest(sft)["setting"], _manifest(sft)["split"]) == (2, "random")
    assert not (out / "data" / "eval_prompts").exists()


def test_scd_run_takes_the_source_split_from_the_settings_file(
    tmp_path, custom, monkeypatch
) -> None:
    from scd.pipeline.run import Run

    monkeypatch.setattr("scd.train.trainer.train", lambda *a, **k: None)  # data only
    recipe = _recipe(tmp_path, custom, "data.setting=2", "run.settings=[2, 12]")
    printed: list[str] = []
    run = Run(recipe, tmp_path / "run", tmp_path / "cache", progress=False, say=printed.append)
    run.generate()
    assert run.eval_prompts == tmp_path / "run" / "data" / "eval_prompts"
    plan = run.plan()
    for job in plan.data:
        run.execute(job)
    for task in plan.tasks:
        for job in task.jobs:
            if job.phase == "own_model":
                run.execute(job)
    stages = [
        "prompts",
        "eval_prompts",
        "setting-2/sft",
        "setting-12/sft",
        "setting-2/arm-sft/train",
        "setting-12/arm-sft/train",
    ]
    assert list(run.state.stages) == stages
    assert printed.count("  prompts ...") == printed.count("  eval_prompts ...") == 1
    assert _manifest(tmp_path / "run" / "setting-2" / "sft")["split"] == "random"
    info = _manifest(tmp_path / "run" / "setting-12" / "sft")
    assert info["split"] == "source" and "eval_prompts" in info["sources_sha256"]


def test_a_bad_settings_file_is_one_line_naming_the_key(tmp_path, custom, capsys) -> None:
    assert _recipe(tmp_path, custom, "data.setting=12").data.setting == 12
    with pytest.raises(InputError, match=r"recipe.yaml: setting 12: expected one of"):
        _recipe(tmp_path, custom, "data.setting=12", "data.settings_file=null")
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(
        InputError, match=rf"--set data.settings_file={missing}: data.settings_file"
    ):
        _recipe(tmp_path, custom, f"data.settings_file={missing}")
    custom["settings"].write_text("3: {split: sideways}\n")
    with pytest.raises(InputError, match=r"recipe.yaml: data.settings_file: .*sideways"):
        _recipe(tmp_path, custom)
    path = tmp_path / "bad.yaml"
    path.write_text(f"model: toy\ndata: {{descriptors: toy, settings_file: {missing}}}\n")
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.settings_file" in err and "bad.yaml" in err
