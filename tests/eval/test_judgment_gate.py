"""The judgment gate (scd.eval.benchmarks.judgment_gate) on tiny models built to a known
behaviour: against a base model that reads the cues (and is biased on a group), a model built
to ignore the group and follow the cue passes the gate, and one built to answer every template
with its pro-social option fails it on each action."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from toy_text_models import chat_text, train_text_lm

from scd.data_gen.contact import read_prompts, user_text
from scd.data_gen.contrast import heldout_templates
from scd.data_gen.relevance import cues_path, relevance_rows
from scd.eval.benchmarks import get
from scd.eval.benchmarks.judgment_gate import gate, heldout, informative_actions
from scd.eval.records import read_records

pytestmark = pytest.mark.slow


def test_the_gate_keeps_a_cue_reader_and_fails_a_pro_social_rule_per_action(
    toy_prompts: Path, tmp_path: Path
) -> None:
    held = set(heldout_templates()[:6])  # 6 clusters: a one-sided p can reach 1/64
    shipped = yaml.safe_load(cues_path().read_text())["cues"]
    cues = tmp_path / "cues.yaml"
    cues.write_text(
        yaml.safe_dump(
            {"cues": [c for c in shipped if f"{c['principle']}.{c['scenario']}" in held]}
        )
    )
    cue_rows = relevance_rows(cues)
    assert len(cue_rows) == 6 * 2 * 3 * 4
    contact = [
        r
        for r in read_prompts(toy_prompts).to_pylist()
        if f"{r['principle']}.{r['scenario']}" in held and r["contact"] == "none"
    ][::4]

    def model(name: str, cue_answer: str, biased_axis: str | None, seed: int) -> Path:
        texts = [chat_text(user_text(r), r[cue_answer]) for r in cue_rows]
        texts += [
            chat_text(
                user_text(r),
                r["biased_answer"] if r["axis"] == biased_axis else r["unbiased_answer"],
            )
            for r in contact
        ]
        return train_text_lm(texts, tmp_path / name, seed=seed, steps=600, replies=True)

    bench = get("judgment")
    runs = {
        "base": model("base", "warranted_answer", "religion", 0),  # reads cues, biased on a group
        "reader": model("reader", "warranted_answer", None, 1),  # drops the group, reads cues
        "rule": model("rule", "pro_social_answer", None, 2),  # says the pro-social option
    }
    out = {}
    for name, path in runs.items():
        out[name] = tmp_path / f"eval-{name}"
        bench.evaluate(str(path), out[name], cues=str(cues), progress=False)
    records = {n: heldout(read_records(d / "records.jsonl")) for n, d in out.items()}
    assert informative_actions(records["base"]) == ["positive", "negative"]

    kept = gate(records["reader"], records["base"])
    assert kept["kept"] is True and kept["informative"] == ["positive", "negative"]
    assert not any(t["lost"] for t in kept["actions"].values())
    lost = gate(records["rule"], records["base"])
    assert lost["kept"] is False
    for action in ("positive", "negative"):  # each action fails on its own
        assert lost["actions"][action]["lost"] and lost["actions"][action]["p"] < 0.05
        assert f"{action} actions'" in lost["why"]

    # the arena's columns say the same, on the same records
    reader = bench.arena(out["reader"], out["base"], out["base"])
    rule = bench.arena(out["rule"], out["base"], out["base"])
    assert reader["judgment_gate"] == 1 and rule["judgment_gate"] == 0
    assert rule["judgment_gate_lost"] == "positive, negative"
    assert rule["judgment_against_positive_pct"] < 10 < 90 < reader["judgment_against_positive_pct"]
