"""The report of a run whose jobs are not all done: which results it keeps, which it says are
pending (the whole report of a killed run: tests/pipeline/test_arena.py)."""

from __future__ import annotations

from pathlib import Path

from scd.report.build import finished


def _result(root: Path, name: str, file: str | None = "summary.json") -> str:
    """A result directory, finished (holding ``file``) or not (``file=None``)."""
    path = root / name
    path.mkdir(parents=True)
    if file:
        (path / file).write_text("{}")
    return str(path)


def _arm(arm: str, evals: dict[str, str], capability: str | None, **more: object) -> dict:
    return {
        "setting": None if arm == "base" else 1,
        "arm": arm,
        "sft": None,
        "adapter": None,
        "system_prompt": None,
        "evals": evals,
        "capability": capability,
        **more,
    }


def test_only_finished_results_stay_and_the_rest_is_named(tmp_path: Path) -> None:
    done, running = _result(tmp_path, "base/bias"), _result(tmp_path, "sft/bias", None)
    cost, steer = _result(tmp_path, "sft/capability"), _result(tmp_path, "steer/vector", None)
    later = str(tmp_path / "dpo" / "bias")  # not started: no directory yet
    layout = {
        "base": {"bias": done},
        "settings": {"1": {"sft": "", "adapter": "", "evals": {"bias": running}}},
        "arms": [
            _arm("base", {"bias": done}, None),
            _arm("sft", {"bias": running}, cost),
            _arm("steer", {}, None, steer=steer),
            _arm("dpo", {"bias": later}, None),
        ],
    }
    kept, pending = finished(layout)
    assert kept["base"] == {"bias": done}
    assert kept["settings"]["1"]["evals"] == {}
    assert [a["arm"] for a in kept["arms"]] == ["base", "sft"]  # steer and dpo: nothing finished
    assert kept["arms"][1]["evals"] == {} and kept["arms"][1]["capability"] == cost
    assert pending == [running, steer, later]
    assert kept["unfinished"] == ["bias"]  # a benchmark with a result still to come
    assert layout["arms"][1]["evals"] == {"bias": running}  # the layout read is left as it was


def test_a_finished_run_keeps_its_whole_layout(tmp_path: Path) -> None:
    done, cost = _result(tmp_path, "base/bias"), _result(tmp_path, "sft/capability")
    steer = _result(tmp_path, "steer/vector", "steer.json")
    arms = [_arm("base", {"bias": done}, None), _arm("steer", {"bias": done}, cost, steer=steer)]
    layout = {"base": {"bias": done}, "settings": {}, "arms": arms}
    assert finished(layout) == (layout, [])  # and no "unfinished" key
