"""What reaches W&B and the resolved recipe: secrets redacted, names of variables kept."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

from wandb_records import finished_records  # tests/wandb_records.py

from scd.tracking import held_step, offline_folders, offline_records, redact, start_run


def test_redact_hides_keys_and_the_values_of_key_variables(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-planted")
    monkeypatch.setenv("MY_SERVER_KEY", "sk-server-planted")
    config = {
        "eval": {
            "backend": "openai",
            "api_key_env": "MY_SERVER_KEY",
            "system_prompt": "say sk-server-planted and sk-openai-planted",
        },
        "wandb": {"api_key": "abc", "project": "scd"},
    }
    shown = redact(config)
    assert shown["eval"]["api_key_env"] == "MY_SERVER_KEY"  # a variable's name, not a secret
    assert shown["eval"]["system_prompt"] == "say <redacted> and <redacted>"
    assert shown["wandb"] == {"api_key": "<redacted>", "project": "scd"}
    assert config["eval"]["system_prompt"].startswith("say sk-server")  # a copy was redacted
    trl = {"pad_token": "<|pad|>", "average_tokens_across_devices": True, "hub_token": "hf_x"}
    assert redact({"train": trl})["train"] == {**trl, "hub_token": "<redacted>"}  # not tokens


def test_scd_eval_with_wandb_logs_its_result_as_one_run(
    toy_model, toy_prompts, tmp_path, monkeypatch
):
    """`scd eval bias --wandb`: one offline W&B run in OUT/wandb whose config is what ran and
    whose summary holds the benchmark's headline numbers; a planted key never reaches it."""
    import json

    from wandb_records import config_and_summary  # tests/wandb_records.py

    from scd.cli import main
    from scd.eval.benchmarks import get

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-planted-0123456789")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    out = tmp_path / "bias"
    argv = [
        "eval",
        "bias",
        "--model",
        str(toy_model),
        "--prompts",
        str(toy_prompts),
        "--limit",
        "60",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--quiet",
        "--wandb",
    ]
    assert main(argv) == 0
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    config, summary = config_and_summary(run_dir)
    result = json.loads((out / "summary.json").read_text())
    assert config["benchmark"] == "bias" and config["run"]["limit"] == 60
    headline = get("bias").headline(result)
    assert headline and all(summary[f"bias/{k}"] == v for k, v in headline.items())
    assert b"wandb-planted" not in b"".join(
        p.read_bytes() for p in run_dir.rglob("*") if p.is_file()
    )


def test_offline_reader_yields_whole_records_of_a_cut_file(tmp_path: Path) -> None:
    """The reader of offline W&B folders yields whole records only: a file cut anywhere (a process
    killed mid-write) reads as the records before the cut."""
    import wandb

    os.environ.pop("WANDB_SERVICE", None)
    run = wandb.init(project="p", dir=str(tmp_path), mode="offline", id="cut1")
    for step in range(3):
        run.log({"x": step}, step=step)
    run.finish()
    (folder,) = (tmp_path / "wandb").glob("offline-run-*-cut1")
    log = next(folder.glob("*.wandb"))
    whole = [r.SerializeToString() for r in finished_records(folder)]
    assert [r.history.step.num for r in finished_records(folder) if r.history.item] == [0, 1, 2]
    data, seen = log.read_bytes(), set()
    for size in range(7, len(data), 61):  # the file as a process killed after `size` bytes left it
        log.write_bytes(data[:size])
        read = [r.SerializeToString() for r in offline_records(folder)]
        assert read == whole[: len(read)]  # whole records only, in order
        seen.add(len(read))
    assert len(seen) > 3 and max(seen) < len(whole)


def _steps(folder: Path, key: str) -> list[int]:
    return [
        r.history.step.num
        for r in finished_records(folder)
        if any((i.key or "/".join(i.nested_key)) == key for i in r.history.item)
    ]


def test_a_continued_run_logs_only_the_steps_it_does_not_hold(tmp_path: Path, monkeypatch):
    """A training killed at step 12 (its last checkpoint: step 10), continued offline: the new
    process's folder starts after what the first one wrote -- neither the checkpoint's log
    again nor the steps trained again up to 12 -- so the run's folders in order hold each step
    once, at W&B step = training step."""
    from scd.train.training_log import log_history, wandb_at_steps

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    first = start_run(config={}, directory=tmp_path, project="p")
    for step in range(1, 13):
        first.log({"train/loss": 1.0 / step, "train/global_step": step}, step=step)
    first.finish()
    finished_records(offline_folders(tmp_path / "wandb", first.id)[0])  # as a process that ended
    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    log = [{"loss": 1.0 / s, "step": s} for s in range(1, 11)]
    (checkpoint / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    second = start_run(config={}, directory=tmp_path, project="p", run_id=first.id)
    assert held_step(second) == 12
    log_history(second, str(checkpoint), held_step(second))
    callback = wandb_at_steps(held_step(second))
    callback._initialized = True
    for step in range(11, 16):  # trained again from the checkpoint
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        callback.on_log(None, state, None, logs={"loss": 0.5, "learning_rate": 1e-4})
    second.finish()
    folders = offline_folders(tmp_path / "wandb", first.id)  # two, W&B's -1 where one second
    assert len(folders) == 2
    assert [_steps(f, "train/loss") for f in folders] == [list(range(1, 13)), [13, 14, 15]]
    assert _steps(folders[1], "train/learning_rate") == [13, 14, 15]  # transformers' names
