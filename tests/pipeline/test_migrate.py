"""A run directory of an earlier scd's layout (SCD's arm in ``setting-N`` itself) brought to this
one's (``setting-N/arm-sft``): the same files as this scd writes, every path that names SCD's
arm rewritten, W&B's own folders and the other arms untouched; a no-op run again; complete
after an interruption anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scd.errors import InputError
from scd.pipeline import migrate
from scd.pipeline.migrate import migrate_run, new_path, old_entries


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _json(path: Path, data: object) -> None:
    _write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _run(run: Path, sft: str) -> None:
    """A run of two settings as an scd wrote it, SCD's arm in ``setting-N/<sft>`` ("": an
    earlier scd's layout, "arm-sft/": this one's): setting 1 finished, with the arena's dpo and
    sft-contrast arms beside it; setting 2 with seeds, its evaluation cut short."""
    one, two = f"{run}/setting-1/{sft}", f"{run}/setting-2/{sft}"
    stages = {
        "prompts": [f"{run}/data/prompts/manifest.json"],
        "base/bias": [f"{run.parent}/cache/base/bias-0123/summary.json"],
        "setting-1/sft": [f"{run}/setting-1/sft/manifest.json"],
        f"setting-1/{sft}train": [f"{one}adapter/train_manifest.json"],
        f"setting-1/{sft}eval/bias": [f"{one}eval/bias/summary.json"],
        f"setting-1/{sft}capability": [f"{one}capability/summary.json"],
        f"setting-1/{sft}push": [f"{one}adapter/hub.json"],
        "setting-1/arm-dpo/train": [f"{run}/setting-1/arm-dpo/adapter/train_manifest.json"],
        "setting-1/arm-sft-contrast/data": [f"{run}/setting-1/arm-sft-contrast/data/manifest.json"],
        f"setting-2/{sft}seed-7/train": [f"{two}seed-7/adapter/train_manifest.json"],
        "report": [f"{run}/report.html"],
    }
    state = {k: {"outputs": v, "seconds": 1.0, "started_at": 1.0} for k, v in stages.items()}
    _json(run / "state.json", {"stages": state})
    _json(run / "recipe.json", {"kind": "scd_run", "recipe": {}, "run_id": run.name})
    evals = {"bias": f"{one}eval/bias"}
    arm = {"setting": 1, "arm": "sft", "sft": f"{run}/setting-1/sft", "evals": evals}
    arm |= {"adapter": f"{one}adapter", "capability": f"{one}capability"}
    setting = {"sft": f"{run}/setting-1/sft", "adapter": f"{one}adapter", "evals": evals}
    _json(run / "layout.json", {"settings": {"1": setting}, "arms": [arm]})
    _write(run / "report.md", f"| Adapter, setting 1 | `{one}adapter` (sha256 `ab`) |\n")
    _write(run / "report.html", f"<td><code>{one}adapter</code></td>\n")
    _write(run / "tables" / "arena.md", "| arm | bias |\n| sft | 1.0 |\n")
    _json(
        run / "setting-1" / "sft" / "manifest.json", {"kind": "sft", "out": f"{run}/setting-1/sft"}
    )
    adapter = Path(f"{one}adapter")
    _json(adapter / "train_manifest.json", {"global_step": 2, "wandb_run_id": "abc"})
    _write(adapter / "recipe.yaml", f"output_dir: {one}adapter\n  sft: {run}/setting-1/sft\n")
    _write(adapter / "README.md", f"# me/scd-setting-1\n\nTrained in `{one}adapter`.\n")
    _write(adapter / "adapter_model.safetensors", "weights naming setting-1/adapter")
    best = {"best_model_checkpoint": f"{one}adapter/checkpoints/checkpoint-2"}
    _json(adapter / "checkpoints" / "checkpoint-2" / "trainer_state.json", best)
    wandb = f"{run}/setting-1/adapter/wandb"  # W&B's records of the run: as they were written
    _write(adapter / "wandb" / "offline-run-1" / "files" / "config.yaml", f"dir: {wandb}\n")
    bias = Path(f"{one}eval/bias")
    _json(bias / "run.json", {"adapter": f"{one}adapter", "model": f"{run.parent}/toy"})
    _json(bias / "summary.json", {"run": {"adapter": f"{one}adapter"}, "bias_pct": 1.0})
    _write(bias / "records.jsonl", '{"prompt_id": "p1"}\n')
    _write(bias / "tables.md", f"# Bias: toy + adapter {one}adapter\n")
    _json(Path(f"{one}capability/summary.json"), {"kl": {"adapter": f"{one}adapter"}})
    _write(Path(f"{one}worker.pid"), "123\n")
    _json(run / "setting-1" / "arm-dpo" / "adapter" / "train_manifest.json", {"global_step": 2})
    rows = {"sft": f"{run}/setting-1/sft"}
    _json(run / "setting-1" / "arm-sft-contrast" / "data" / "manifest.json", rows)
    seeded = Path(f"{two}seed-7")
    _json(seeded / "adapter" / "train_manifest.json", {"global_step": 2})
    _json(seeded / "eval" / "bias" / "run.json", {"adapter": f"{two}seed-7/adapter"})
    _write(seeded / "eval" / "bias" / "records.jsonl", '{"prompt_id": "p1"}\n')


def _files(run: Path) -> dict[str, bytes]:
    """Every file of ``run`` and its bytes (the state's lock aside: an empty file)."""
    files = sorted(p for p in run.rglob("*") if p.is_file() and p.name != ".state.lock")
    return {str(p.relative_to(run)): p.read_bytes() for p in files}


def _this_scds(run: Path) -> dict[str, bytes]:
    """What this scd writes for the same run (W&B's records of it as W&B wrote them)."""
    _run(run, "arm-sft/")
    return _files(run)


@pytest.fixture
def expected(tmp_path: Path) -> dict[str, bytes]:
    return _this_scds(tmp_path / "expected" / "run")


def _expected_at(run: Path, expected: dict[str, bytes], where: Path) -> dict[str, bytes]:
    """``expected`` (a run at ``where``) for the same run at ``run``."""
    old, new = str(where.parent).encode(), str(run.parent).encode()
    return {k: v.replace(old, new) for k, v in expected.items()}


def test_the_paths_of_scds_arm_and_only_those_move() -> None:
    assert new_path("out/r/setting-1/eval/bias") == "out/r/setting-1/arm-sft/eval/bias"
    assert new_path("setting-12/seed-7/train") == "setting-12/arm-sft/seed-7/train"
    assert new_path('"setting-1/push"') == '"setting-1/arm-sft/push"'
    assert new_path("`r/setting-1/adapter` (sha256") == "`r/setting-1/arm-sft/adapter` (sha256"
    for same in (
        "r/setting-1/sft/heldout",  # the setting's data
        "r/setting-1/arm-dpo/adapter",
        "r/setting-1/arm-sft-contrast/eval/bias",
        "r/setting-1/arm-sft/adapter",  # moved already
        "r/setting-1/evaluation",
        "r/setting-1/train.parquet",
        "r/my-setting-1/adapter",
        "group/setting-1",  # a W&B run's name
    ):
        assert new_path(same) == same


def test_an_earlier_layout_becomes_what_this_scd_writes(tmp_path, expected) -> None:
    run = tmp_path / "expected" / "run"
    for p in sorted(run.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    _run(run, "")
    said: list[str] = []
    assert migrate_run(run, say=said.append)
    assert _files(run) == expected
    assert said == [
        f"{run}: an earlier scd's layout: moved setting-1/adapter, setting-1/capability, "
        "setting-1/eval, setting-1/worker.pid, setting-2/seed-7 into setting-<N>/arm-sft/, "
        "paths rewritten"
    ]
    stages = json.loads((run / "state.json").read_text())["stages"]
    assert "setting-1/arm-sft/eval/bias" in stages and "setting-1/sft" in stages
    assert stages["setting-2/arm-sft/seed-7/train"]["outputs"] == [
        f"{run}/setting-2/arm-sft/seed-7/adapter/train_manifest.json"
    ]


def test_run_again_it_changes_nothing(tmp_path, expected) -> None:
    run = tmp_path / "expected" / "run"
    assert not migrate_run(run)  # this scd's layout: nothing to do
    assert _files(run) == expected
    old = tmp_path / "old" / "run"
    _run(old, "")
    assert migrate_run(old)
    mtimes = {p: p.stat().st_mtime_ns for p in old.rglob("*")}
    said: list[str] = []
    assert not migrate_run(old, say=said.append) and said == []
    assert {p: p.stat().st_mtime_ns for p in old.rglob("*")} == mtimes
    assert not migrate_run(tmp_path / "none")  # no run directory


class _Stop(Exception):
    pass


def _steps(monkeypatch: pytest.MonkeyPatch, stop_at: int | None) -> list[str]:
    """Count the migration's steps that write (each file rewritten, each move, the state),
    stopping it at step ``stop_at`` as a kill would."""
    done: list[str] = []
    for name in ("_rewrite", "_move", "_rewrite_state"):
        real = getattr(migrate, name)

        def step(path: Path, real=real, name=name) -> None:
            if len(done) == stop_at:
                raise _Stop(f"{name} {path}")
            done.append(f"{name} {path}")
            real(path)

        monkeypatch.setattr(migrate, name, step)
    return done


def test_a_migration_stopped_anywhere_completes_when_run_again(
    tmp_path, expected, monkeypatch
) -> None:
    counted = tmp_path / "counted" / "run"
    _run(counted, "")
    with monkeypatch.context() as m:
        done = _steps(m, None)
        migrate_run(counted)
    steps = len(done)
    assert steps > 10, done
    where = tmp_path / "expected" / "run"
    for stop_at in range(steps):
        run = tmp_path / f"stopped-{stop_at}" / "run"
        _run(run, "")
        with monkeypatch.context() as m:
            _steps(m, stop_at)
            with pytest.raises(_Stop):
                migrate_run(run)
        assert migrate_run(run), stop_at
        assert _files(run) == _expected_at(run, expected, where), stop_at
        assert not migrate_run(run)


def test_moved_by_hand_in_part_it_still_completes(tmp_path, expected) -> None:
    run = tmp_path / "part" / "run"
    _run(run, "")
    (run / "setting-1" / "arm-sft").mkdir()
    (run / "setting-1" / "eval").rename(run / "setting-1" / "arm-sft" / "eval")
    (run / "setting-2" / "arm-sft").mkdir()
    (run / "setting-2" / "seed-7").rename(run / "setting-2" / "arm-sft" / "seed-7")
    assert [e.name for e in old_entries(run)] == ["adapter", "capability", "worker.pid"]
    assert migrate_run(run)
    assert _files(run) == _expected_at(run, expected, tmp_path / "expected" / "run")


def test_a_taken_place_is_refused_and_nothing_is_lost(tmp_path) -> None:
    run = tmp_path / "taken" / "run"
    _run(run, "")
    _write(run / "setting-1" / "arm-sft" / "eval" / "bias" / "summary.json", "{}")
    before = _files(run)
    with pytest.raises(InputError, match="setting-1/eval: SCD's arm as an earlier scd kept it"):
        migrate_run(run)
    after = _files(run)
    assert len(after) == len(before)  # rewritten in place, nothing moved over another
    assert after["setting-1/arm-sft/eval/bias/summary.json"] == b"{}"
