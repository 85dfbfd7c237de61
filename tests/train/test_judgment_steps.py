"""Judgment while training (train.select_judgment): the relevance controls it measures are the
training templates' with the evaluation cues on the setting's training side -- never a held-out
template of the judgment, never a training cue -- and select best skips a step that lost the
gate."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from scd.config.schema import TrainSpec
from scd.data_gen.contrast import heldout_templates, load_training_cues
from scd.data_gen.sft import write_sft
from scd.train.bias_steps import selection
from scd.train.judgment_steps import judgment_rows


@pytest.mark.parametrize(("setting", "n"), [(1, 15 * 2 * 3 * 4), (3, 15 * 2 * 1 * 4)])
def test_judgment_rows_are_the_training_templates_on_the_training_side(
    setting: int, n: int, toy_prompts: Path, tmp_path: Path
) -> None:
    sft = tmp_path / "sft"
    write_sft(toy_prompts, setting, sft, max_train=40, max_eval=10)
    rows = judgment_rows(sft)
    assert len(rows) == n
    held = set(heldout_templates())
    assert not any(f"{r['principle']}.{r['scenario']}" in held for r in rows)
    if setting == 3:  # trains on certainty prompts
        assert {r["scale"] for r in rows} == {"certainty"}
    training = {c for t in load_training_cues().values() for d in t.values() for c in d}
    assert not any(r["cue"] in training for r in rows)


def _state(*entries: tuple[int, float, int | None]) -> SimpleNamespace:
    history = [
        {"step": s, "eval_bias_pct": b, **({} if g is None else {"eval_judgment_gate": g})}
        for s, b, g in entries
    ]
    return SimpleNamespace(log_history=history, global_step=entries[-1][0])


def test_select_best_with_the_gate_keeps_the_lowest_bias_among_steps_that_kept_judgment() -> None:
    state = _state((4, 10.0, 1), (8, 0.0, 0), (12, 5.0, 1))
    gated = selection(TrainSpec(select="best", select_judgment=True, eval_every_steps=4), state)
    assert gated["step"] == 12 and gated["eval_judgment_gate"] == 1
    assert gated["why"].endswith("of 3 measured steps with the judgment gate kept")
    plain = selection(TrainSpec(select="best", eval_every_steps=4), state)
    assert plain["step"] == 8  # the rule-learning step, without the gate
    lost = _state((4, 10.0, 0), (8, 0.0, 0))
    none = selection(TrainSpec(select="best", select_judgment=True, eval_every_steps=4), lost)
    assert none["step"] == 8 and none["why"].startswith("no measured step of 2 had")
