"""``scd run --launcher ray`` on a local Ray cluster of 2 CPUs: settings side by side, the same
tables as the local launcher, a killed worker retried, a failed setting named, sharded
evaluations equal to unsharded ones."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from scd.cli import main
from scd.io import cache_key
from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict
from scd.quickstart import QUICKSTART_RECIPE

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
RECIPE = {
    **QUICKSTART_RECIPE,
    "data": {**QUICKSTART_RECIPE["data"], "max_train": 40, "max_eval": 10},
    "train": {**QUICKSTART_RECIPE["train"], "max_steps": 4},
    "eval": {"bias": {"enabled": True, "limit": 200}},
    "wandb": {"enabled": False},
    "run": {"name": "two", "settings": [1, 3]},
}


def _outputs(root: Path, toy_model: Path) -> Path:
    """An outputs root whose cache holds the toy model already."""
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, root / "cache" / "toy-model" / key)
    return root


def _tables(run: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((run / "tables").glob("*.csv"))}


@pytest.fixture(scope="module")
def local_tables(tmp_path_factory, toy_model: Path) -> dict[str, str]:
    root = _outputs(tmp_path_factory.mktemp("local"), toy_model)
    run_recipe(
        recipe_from_dict(RECIPE, "test"),
        root / "two",
        root / "cache",
        progress=False,
        say=lambda _: None,
    )
    return _tables(root / "two")


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs (one task per CPU)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_settings_run_side_by_side_with_the_local_launchers_tables(
    cluster, local_tables, tmp_path, toy_model
) -> None:
    root = _outputs(tmp_path, toy_model)
    said: list[str] = []
    run_recipe(
        recipe_from_dict(RECIPE, "test"),
        root / "two",
        root / "cache",
        progress=False,
        say=said.append,
        launcher="ray",
    )
    stages = json.loads((root / "two" / "state.json").read_text())["stages"]
    span = {
        n: (
            min(v["started_at"] for k, v in stages.items() if k.startswith(f"setting-{n}/")),
            max(v["finished_at"] for k, v in stages.items() if k.startswith(f"setting-{n}/")),
        )
        for n in (1, 3)
    }
    assert span[1][0] < span[3][1] and span[3][0] < span[1][1], span  # side by side
    assert _tables(root / "two") == local_tables and local_tables
    assert any("3 Ray tasks" in line for line in said)
    again: list[str] = []  # a finished run is a no-op
    run_recipe(
        recipe_from_dict(RECIPE, "test"),
        root / "two",
        root / "cache",
        progress=False,
        say=again.append,
        launcher="ray",
    )
    assert any("nothing to do" in line for line in again)


def test_the_arenas_arms_run_as_ray_tasks_to_the_local_launchers_table(
    cluster, tmp_path, toy_model
) -> None:
    recipe = {**RECIPE, "arms": ["base", "prompt", "sft", "dpo"], "run": {"name": "arena"}}
    tables = {}
    for launcher in ("local", "ray"):
        root = _outputs(tmp_path / launcher, toy_model)
        said: list[str] = []
        run_recipe(
            recipe_from_dict(recipe, "test"),
            root / "arena",
            root / "cache",
            progress=False,
            say=said.append,
            launcher=launcher,
        )
        tables[launcher] = (root / "arena" / "tables" / "arena.csv").read_text()
    assert any("4 Ray tasks: setting 1 prompt, setting 1, setting 1 dpo, base" in x for x in said)
    assert tables["ray"] == tables["local"] and tables["local"].count("\n") == 5


def test_a_failed_setting_is_named_and_the_others_finish(cluster, tmp_path, toy_model) -> None:
    root = _outputs(tmp_path, toy_model)
    (root / "two" / "setting-3" / "arm-sft").mkdir(parents=True)
    (root / "two" / "setting-3" / "arm-sft" / "adapter").write_text("not a directory")
    recipe = tmp_path / "two.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    argv = ["run", str(recipe), "--outputs", str(root), "--launcher", "ray", "--no-progress"]
    code, err = _main(argv)
    assert code == 1 and "setting 3: " in err and "setting 1" not in err, err
    assert (root / "two" / "setting-1" / "arm-sft" / "eval" / "bias" / "summary.json").is_file()
    assert not (root / "two" / "report.html").exists()


def _main(argv: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def test_a_killed_worker_is_retried_to_the_same_tables(local_tables, tmp_path, toy_model):
    """In a process of its own (its own local cluster): kill the worker of setting 1 as soon as
    it starts; Ray reruns the task, which resumes from the run's state."""
    root = _outputs(tmp_path, toy_model)
    recipe = tmp_path / "two.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    cmd = [
        sys.executable,
        "-m",
        "scd",
        "run",
        str(recipe),
        "--outputs",
        str(root),
        "--launcher",
        "ray",
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    pid_file, killed = root / "two" / "setting-1" / "arm-sft" / "worker.pid", None
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and killed is None:
        if pid_file.is_file() and pid_file.read_text().strip():
            killed = int(pid_file.read_text())
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:  # retries exhausted or the driver died: a re-run resumes
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    assert killed is not None, out
    assert int(pid_file.read_text()) != killed  # the task ran again, in another worker
    assert _tables(root / "two") == local_tables


def test_sharded_evaluations_equal_the_unsharded_one(
    cluster, toy_model: Path, toy_prompts: Path, tmp_path
) -> None:
    from scd.eval.benchmarks import get
    from scd.pipeline.ray_launcher import _launch_shards

    kw = {"limit": 120, "progress": False, "chunk_size": 16}
    whole = get("bias").evaluate(str(toy_model), tmp_path / "whole", prompts=toy_prompts, **kw)
    turn = get("bias").evaluate(
        str(toy_model), tmp_path / "turn", prompts=toy_prompts, shards=3, **kw
    )
    records = (tmp_path / "whole" / "records.jsonl").read_text()
    assert records and (tmp_path / "turn" / "records.jsonl").read_text() == records
    assert turn["overall"] == whole["overall"]
    assert len(list((tmp_path / "turn" / "shards").iterdir())) == 3
    timed = [json.loads(x) for x in (tmp_path / "turn" / "timing.jsonl").read_text().splitlines()]
    spans = [(t["start"], t["stop"]) for t in timed]  # the shards' chunks, in the whole list
    assert [a for a, _ in spans[1:]] == [b for _, b in spans[:-1]]
    assert spans[0][0] == 0 and spans[-1][1] == len(records.splitlines()) and len(spans) > 3
    # on Ray: record for record; log-probabilities to 1e-5 (a Ray worker computes with one
    # thread and the shards batch other prompts together: float sums differ in the last digits)
    on_ray = get("bias").evaluate(
        str(toy_model), tmp_path / "ray", prompts=toy_prompts, shards=2, launch=_launch_shards, **kw
    )
    a = [json.loads(x) for x in records.splitlines()]
    b = [json.loads(x) for x in (tmp_path / "ray" / "records.jsonl").read_text().splitlines()]
    floats = ("option_logprobs", "option_probs")
    assert len(a) == len(b) == whole["overall"]["n"] + whole["n_baseline_records"]
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if k not in floats} == {
            k: v for k, v in y.items() if k not in floats
        }
        for key in floats:
            assert x[key] == pytest.approx(y[key], abs=1e-5)
    assert on_ray["overall"]["n"] == whole["overall"]["n"]


def test_launcher_ray_without_ray_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    code = main(["run", str(recipe), "--outputs", str(tmp_path / "o"), "--launcher", "ray"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "pip install 'scd[ray]'" in err, err
    assert not (tmp_path / "o").exists()


def test_a_task_with_several_gpus_trains_under_torchrun(toy_model: Path, tmp_path, monkeypatch):
    """The training of a setting whose Ray task asks for 2 GPUs: 2 torchrun processes (CPU
    ranks here), one adapter."""
    import dataclasses

    from scd.pipeline.torchrun import torchrun_train as _torchrun_train

    recipe = recipe_from_dict({**RECIPE, "model": str(toy_model)}, "test")
    recipe = dataclasses.replace(recipe, output_dir=str(tmp_path / "adapter"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    _torchrun_train(recipe, 2, False, tmp_path)
    info = json.loads((tmp_path / "adapter" / "train_manifest.json").read_text())
    assert info["world_size"] == 2 and (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    assert yaml.safe_load((tmp_path / "train_recipe.yaml").read_text())["model"] == str(toy_model)
