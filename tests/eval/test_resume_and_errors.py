"""Resume after SIGKILL, bad input, and the vLLM engine (its CPU-testable parts + a GPU test)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vllm_reference import option_logprob  # tests/eval/vllm_reference.py

from scd.cli import main
from scd.eval.benchmarks import get
from scd.eval.records import RecordLog, read_records, scoring_time


def _cmd(model: Path, prompts: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scd",
        "eval",
        "bias",
        "--model",
        str(model),
        "--prompts",
        str(prompts),
        "--out",
        str(out),
        "--limit",
        "1200",
        "--chunk-size",
        "50",
        "--batch-size",
        "16",
    ]


@pytest.mark.slow
def test_sigkill_then_resume_gives_identical_records(toy_model, toy_prompts, tmp_path) -> None:
    reference = tmp_path / "reference"
    subprocess.run(_cmd(toy_model, toy_prompts, reference), check=True, capture_output=True)
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for target in (120, 700):  # kill twice, at different points
        proc = subprocess.Popen(
            _cmd(toy_model, toy_prompts, killed),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        records = killed / "records.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if records.exists() and records.read_bytes().count(b"\n") >= target:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with open(killed / "records.jsonl", "ab") as fh:  # a torn write, as if killed mid-line
        fh.write(b'{"prompt_id":"torn')
    subprocess.run(_cmd(toy_model, toy_prompts, killed), check=True, capture_output=True)
    assert (killed / "records.jsonl").read_bytes() == (reference / "records.jsonl").read_bytes()
    timed = (killed / "timing.jsonl").read_text().splitlines()  # each chunk once, in order
    n = len(read_records(reference / "records.jsonl"))
    assert [json.loads(line)["start"] for line in timed] == list(range(0, n, 50))
    assert (
        json.loads((killed / "summary.json").read_text())["overall"]
        == json.loads((reference / "summary.json").read_text())["overall"]
    )
    # a finished run is a no-op; the summary still says what ran ("auto" became float32, cpu)
    before = (killed / "records.jsonl").stat().st_mtime_ns
    subprocess.run(_cmd(toy_model, toy_prompts, killed), check=True, capture_output=True)
    assert (killed / "records.jsonl").stat().st_mtime_ns == before
    ran = json.loads((killed / "summary.json").read_text())["run"]["ran"]
    assert ran == {"device": "cpu", "dtype": "float32"}


def test_record_log_truncates_to_whole_chunks(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    log = RecordLog(path, chunk_size=3, total=10)
    log.append([{"i": i} for i in range(3)])
    log.append([{"i": i} for i in range(3, 6)])
    with open(path, "ab") as fh:
        fh.write(b'{"i":6}\n{"i":7')  # part of the third chunk, then a torn line
    with open(tmp_path / "timing.jsonl", "a") as fh:
        fh.write('{"start":6,"stop":9,"seconds":1.0}\n{"start":9,')  # a chunk not kept, torn
    resumed = RecordLog(path, chunk_size=3, total=10)
    assert resumed.done == 6 and [r["i"] for r in resumed.read()] == list(range(6))
    assert list(resumed.chunks()) == [(6, 9), (9, 10)]
    timed = [json.loads(line) for line in (tmp_path / "timing.jsonl").read_text().splitlines()]
    assert [(t["start"], t["stop"]) for t in timed] == [(0, 3), (3, 6)]
    for lo, hi in resumed.chunks():
        resumed.append([{"i": i} for i in range(lo, hi)])
    assert scoring_time(tmp_path)[0] == 10 and scoring_time(tmp_path)[1] >= 0


def test_a_chunk_timed_but_not_written_is_timed_again_once(tmp_path: Path) -> None:
    (tmp_path / "timing.jsonl").write_text('{"start":0,"stop":3,"seconds":1.0}\n')  # then killed
    log = RecordLog(tmp_path / "records.jsonl", chunk_size=3, total=5)
    assert log.done == 0 and (tmp_path / "timing.jsonl").read_text() == ""
    for lo, hi in log.chunks():
        log.append([{"i": i} for i in range(lo, hi)])
    assert scoring_time(tmp_path)[0] == 5


def _fails(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    # the one informational line a model's load may say first (the threads torch computes with,
    # said once per process and choice, so whether it shows depends on the tests before)
    said = [line for line in err.splitlines() if not line.startswith("threads: ")]
    assert len(said) == 1 and said[0].startswith("scd: error: "), err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def test_bad_input_is_one_line(toy_model, toy_prompts, tmp_path, capsys) -> None:
    base = ["eval", "bias", "--prompts", str(toy_prompts), "--out", str(tmp_path / "o")]
    _fails(
        capsys,
        ["eval", "bias", "--model", str(tmp_path / "missing"), *base[2:]],
        "--model",
        "missing",
    )
    assert not (tmp_path / "o").exists()  # a run that could not start leaves nothing
    _fails(
        capsys,
        [
            "eval",
            "bias",
            "--model",
            str(toy_model),
            "--prompts",
            str(tmp_path),
            "--out",
            str(tmp_path / "o2"),
        ],
        "no prompts.parquet",
    )
    with pytest.raises(SystemExit) as exc:
        main(["eval", "bias", "--model", str(toy_model), *base[2:], "--backend", "tgi"])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["eval", "bias", "--model", str(toy_model), *base[2:], "--mode", "sample"])
    capsys.readouterr()
    _fails(
        capsys,
        ["eval", "bias", "--model", str(toy_model), *base[2:], "--adapter", str(tmp_path)],
        "--adapter",
        "adapter_config.json",
    )


def test_adapter_for_another_base_is_rejected(toy_model, toy_prompts, tmp_path, capsys) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    other = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=50,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    peft = get_peft_model(other, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    peft.save_pretrained(tmp_path / "adapter")
    _fails(
        capsys,
        [
            "eval",
            "bias",
            "--model",
            str(toy_model),
            "--adapter",
            str(tmp_path / "adapter"),
            "--prompts",
            str(toy_prompts),
            "--limit",
            "30",
            "--out",
            str(tmp_path / "o"),
        ],
        "--adapter",
        "does not fit",
    )


def test_changed_options_into_the_same_out_are_refused(toy_model, toy_prompts, tmp_path, capsys):
    get("bias").evaluate(
        str(toy_model), tmp_path / "o", prompts=toy_prompts, limit=30, progress=False
    )
    _fails(
        capsys,
        [
            "eval",
            "bias",
            "--model",
            str(toy_model),
            "--prompts",
            str(toy_prompts),
            "--limit",
            "60",
            "--out",
            str(tmp_path / "o"),
        ],
        "another configuration",
        "limit",
    )
    args = [
        "eval",
        "bias",
        "--model",
        str(toy_model),
        "--prompts",
        str(toy_prompts),
        "--limit",
        "30",
        "--out",
        str(tmp_path / "o"),
    ]
    _fails(capsys, [*args, "--dtype", "bfloat16"], "another configuration", "dtype")
    pinned = json.loads((tmp_path / "o" / "run.json").read_text())
    del pinned["dtype"]  # a run pinned before run.json held the dtype: it ran on the default
    (tmp_path / "o" / "run.json").write_text(json.dumps(pinned))
    assert main(args) == 0
    _fails(capsys, [*args, "--dtype", "bfloat16"], "another configuration", "dtype")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_missing_gives_install_hint(toy_model, toy_prompts, tmp_path, capsys) -> None:
    _fails(
        capsys,
        [
            "eval",
            "bias",
            "--model",
            str(toy_model),
            "--prompts",
            str(toy_prompts),
            "--backend",
            "vllm",
            "--limit",
            "30",
            "--out",
            str(tmp_path / "o"),
        ],
        "vLLM",
        "pip install",
    )


def test_vllm_option_logprob_sums_the_option_positions() -> None:
    class Lp:
        def __init__(self, x: float) -> None:
            self.logprob = x

    tokens = [1, 5, 9, 4, 7]
    prompt_logprobs = [None, {5: Lp(-0.5)}, {9: Lp(-1.0)}, {4: Lp(-0.25)}, {7: -2.0}]
    assert option_logprob(prompt_logprobs, tokens, 2) == pytest.approx(-2.25)
    assert option_logprob(prompt_logprobs, tokens, 1) == pytest.approx(-2.0)


def test_progress_lands_in_a_log_file_as_lines(toy_model, toy_prompts, tmp_path) -> None:
    """stderr to a file (SLURM, nohup, CI): plain lines with done/total, rate and ETA, a resumed
    evaluation says where it resumes, and --quiet silences both."""
    import os
    import subprocess
    import sys

    out, log = tmp_path / "out", tmp_path / "eval.log"
    argv = [
        sys.executable,
        "-m",
        "scd",
        "eval",
        "bias",
        "--model",
        str(toy_model),
        "--prompts",
        str(toy_prompts),
        "--limit",
        "300",
        "--chunk-size",
        "64",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    env = {**os.environ, "SCD_PROGRESS_SECONDS": "0"}  # a line after every chunk
    with open(log, "w") as fh:
        assert subprocess.run(argv, stderr=fh, env=env).returncode == 0
    lines = [x for x in log.read_text().splitlines() if x.startswith("scd eval bias: ")]
    assert len(lines) >= 5 and "\r" not in log.read_text(), log.read_text()
    assert "/s, ETA " in lines[0] and lines[-1].endswith(", done")
    records = out / "records.jsonl"
    records.write_text("".join(records.read_text().splitlines(True)[:128]))  # as if killed
    (out / "summary.json").unlink()
    again = subprocess.run(argv, stderr=subprocess.PIPE, text=True, env=env)
    assert "scd eval bias: resuming at 128/" in again.stderr
    quiet = subprocess.run([*argv, "--quiet"], stderr=subprocess.PIPE, text=True, env=env)
    assert quiet.returncode == 0 and "scd eval bias" not in quiet.stderr
    # one chunk of 300 prompts: the engine's batches of 32 move the line inside it
    one_chunk = [
        *argv[:-2],
        "--chunk-size",
        "512",
        "--batch-size",
        "32",
        "--out",
        str(tmp_path / "one"),
    ]
    run = subprocess.run(one_chunk, stderr=subprocess.PIPE, text=True, env=env)
    lines = [x for x in run.stderr.splitlines() if x.startswith("scd eval bias: ")]
    assert len(lines) >= 9 and sum(", done" in x for x in lines) == 1, run.stderr
