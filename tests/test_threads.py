"""Threads that fit the machine (#76): torch's intra-op threads from the CPUs the process may use
(affinity, cgroup quota) and the model's size, an override that wins, a bad override refused in
one line, and the choice recorded in ``run.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scd.config.threads import SMALL_MODEL, cgroup_cpus, choose_threads
from scd.errors import InputError

BIG = 135_000_000  # SmolLM2-135M
TOY = 139_072  # the toy model


@pytest.mark.parametrize(
    ("affinity", "quota", "params", "threads"),
    [
        (2, None, TOY, 1),  # a small model: one thread, whatever the machine
        (64, None, TOY, 1),
        (2, None, BIG, 2),  # else one per CPU it may use
        (64, 1.5, BIG, 1),  # a quota of 1.5 CPUs on a 64-CPU node: rounded down
        (64, 4.0, BIG, 4),
        (2, 8.0, BIG, 2),  # a quota above the affinity: the affinity
        (64, 0.5, BIG, 1),  # at least one
        (2, None, 840_000, 2),  # two threads were 1.25x faster at 0.84M
        (8, None, None, 8),  # a model of unknown size: one per CPU
        (8, None, SMALL_MODEL, 8),
        (8, None, SMALL_MODEL - 1, 1),
    ],
)
def test_the_rule_from_affinity_quota_and_size(affinity, quota, params, threads) -> None:
    assert choose_threads(affinity, quota, params).threads == threads


def test_an_override_wins_and_omp_num_threads_is_kept() -> None:
    assert choose_threads(64, 1.5, TOY, override="3").threads == 3
    assert choose_threads(2, None, BIG, override="3", omp="1").threads == 3
    assert choose_threads(2, None, TOY, omp="4").threads == 4  # what torchrun / Ray set
    assert choose_threads(2, None, TOY, omp="4,2").threads == 4  # a nested list: the first
    assert choose_threads(2, None, BIG, omp="x").threads == 2  # torch ignores it too
    assert choose_threads(2, None, TOY, override="auto", omp="").threads == 1
    torch_own = choose_threads(2, None, TOY, override="torch", omp="1")
    assert torch_own.threads is None and "torch" in torch_own.why


@pytest.mark.parametrize("bad", ["abc", "0", "-1", "1.5", "2 threads"])
def test_a_bad_override_names_the_variable(bad) -> None:
    with pytest.raises(InputError) as err:
        choose_threads(2, None, TOY, override=bad)
    assert str(err.value).startswith(f"SCD_THREADS={bad!r}: expected a positive number")


def test_the_line_says_why() -> None:
    assert choose_threads(2, None, TOY).line() == (
        "threads: 1 (a small model, 0.14M parameters; 2 CPUs available)"
    )
    assert choose_threads(64, 1.5, BIG).line() == (
        "threads: 1 (one per usable CPU; 64 CPUs available, a CPU quota of 1.5)"
    )


def _cgroup(tmp_path: Path, self_line: str, files: dict[str, str]) -> float | None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "self").write_text(self_line + "\n")
    return cgroup_cpus(tmp_path / "fs", tmp_path / "self")


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    files = {"fs/job/cpu.max": "150000 100000\n", "fs/cpu.max": "max 100000\n"}
    assert _cgroup(tmp_path, "0::/job", files) == 1.5
    assert _cgroup(tmp_path / "b", "0::/job/step", {"fs/job/cpu.max": "max 100000"}) is None
    nested = {"fs/a/cpu.max": "400000 100000", "fs/a/b/cpu.max": "800000 100000"}
    assert _cgroup(tmp_path / "c", "0::/a/b", nested) == 4.0  # the tightest on the path


def test_cgroup_v1_quota_and_none(tmp_path: Path) -> None:
    v1 = {
        "fs/cpu,cpuacct/slurm/cpu.cfs_quota_us": "200000",
        "fs/cpu,cpuacct/slurm/cpu.cfs_period_us": "100000",
    }
    assert _cgroup(tmp_path, "4:cpu,cpuacct:/slurm", v1) == 2.0
    unlimited = {"fs/cpu/cpu.cfs_quota_us": "-1", "fs/cpu/cpu.cfs_period_us": "100000"}
    assert _cgroup(tmp_path / "b", "2:cpu:/", unlimited) is None
    assert _cgroup(tmp_path / "c", "0::/", {}) is None  # no cgroup files at all


def _scd(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scd", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
        check=False,
    )


def test_a_bad_scd_threads_is_one_line_before_any_work(tmp_path: Path) -> None:
    done = _scd("toy-model", "--out", str(tmp_path / "toy"), env={"SCD_THREADS": "abc"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "scd: error: SCD_THREADS='abc': expected a positive number of threads, auto (scd's "
        "rule) or torch (torch's own default)"
    ]
    assert not (tmp_path / "toy").exists()
    flag = _scd("toy-model", "--out", str(tmp_path / "toy"), "--threads", "0", env={})
    assert flag.returncode == 2 and "--threads: expected a positive number" in flag.stderr


def test_the_choice_lands_in_run_json(toy_model: Path, toy_prompts: Path, tmp_path: Path) -> None:
    args = ["eval", "bias", "--model", str(toy_model), "--prompts", str(toy_prompts)]
    args += ["--limit", "40", "--quiet", "--out"]
    done = _scd(*args, str(tmp_path / "set"), "--threads", "3", env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert "threads: 3 (SCD_THREADS or --threads; " in done.stderr
    recorded = json.loads((tmp_path / "set" / "run.json").read_text())["threads"]
    assert recorded["threads"] == 3 and recorded["why"] == "SCD_THREADS or --threads"
    assert recorded["omp_wait_policy"] == "PASSIVE"  # set by the command before torch loaded
    # the rule's own choice: the toy model is small (no OMP_NUM_THREADS, no SCD_THREADS)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "SCD_THREADS")}
    cmd = [sys.executable, "-m", "scd", *args, str(tmp_path / "rule")]
    rule = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert rule.returncode == 0, rule.stderr
    assert "threads: 1 (a small model, " in rule.stderr
    recorded = json.loads((tmp_path / "rule" / "run.json").read_text())["threads"]
    assert recorded["threads"] == 1 and recorded["why"].startswith("a small model")
    # recorded, not pinned: the run summarized again with other threads is not refused
    again = _scd(*args, str(tmp_path / "set"), "--threads", "1", env={})
    assert again.returncode == 0, again.stderr


def test_the_commands_let_openmp_threads_sleep(monkeypatch) -> None:
    from scd.cli import _use_threads_flag

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("SCD_THREADS", raising=False)
    _use_threads_flag("2")
    assert os.environ["SCD_THREADS"] == "2" and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # one already set wins
    _use_threads_flag(None)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    _use_threads_flag("torch")  # torch's own choice: nothing of scd's
    assert "OMP_WAIT_POLICY" not in os.environ
