"""The arena columns of the bias, BBQ and SDS benchmarks, on result directories built by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.benchmarks.bbq.metrics import bbq_metrics
from scd.eval.benchmarks.stigma.sds import summarize_sds
from scd.eval.records import dump_record

OPTIONS = {"certainty": ["Yes", "No"], "likelihood": ["Likely", "Unlikely"]}


def write(out: Path, records: list[dict], summary: dict | None = None) -> Path:
    """A result directory: ``records.jsonl`` and ``summary.json``."""
    out.mkdir(parents=True)
    (out / "records.jsonl").write_text("".join(dump_record(r) + "\n" for r in records))
    (out / "summary.json").write_text(json.dumps(summary or {"run": {"model": "m"}}))
    return out


def brec(
    pid: str,
    biased: bool,
    *,
    scale: str = "certainty",
    baseline: bool = False,
    first: bool | None = None,
    unparsed: bool = False,
    cell: int = 1,
) -> dict:
    """A bias record as the evaluator writes it. The biased answer is the first option on a
    negative action, so ``first`` (default: ``biased``) picks the action."""
    options = OPTIONS[scale]
    first = biased if first is None else first
    negative = first == biased
    biased_answer, unbiased_answer = options if negative else options[::-1]
    chosen = None if unparsed else biased_answer if biased else unbiased_answer
    return {
        "prompt_id": pid,
        "set_id": f"set-{pid}",
        "principle": f"p{cell}",
        "scenario": "s1",
        "action": "negative" if negative else "positive",
        "scale": scale,
        "contact": "none",
        "axis": "baseline" if baseline else "religion",
        "bucket": None,
        "descriptor": None if baseline else "Muslim",
        "baseline": baseline,
        "options": options,
        "unbiased_answer": unbiased_answer,
        "biased_answer": biased_answer,
        "chosen": chosen,
        "option_logprobs": None,
        "option_probs": None,
        "generated": None,
        "biased": chosen == biased_answer,
        "unparsed": chosen is None,
    }


def flags(prefix: str, biased: list[bool], cells: int = 1, **kw) -> list[dict]:
    """Records of ``biased`` flags, spread over ``cells`` template cells (by principle)."""
    return [brec(f"{prefix}{i}", b, cell=i % cells, **kw) for i, b in enumerate(biased)]


def wilson_pct(k: int, n: int) -> Any:
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return pytest.approx((100 * low, 100 * high), abs=1e-9)  # unrounded: the table rounds once


BIAS = get("bias")


# -- bias ----------------------------------------------------------------------------------------
def test_bias_rates_and_wilson_intervals(tmp_path: Path) -> None:
    desc = flags("d", [True] * 3 + [False] * 6) + [brec("d9", False, unparsed=True)]
    base = flags("b", [True, False, False, False], baseline=True)
    arm = write(tmp_path / "arm", desc + base)
    row = BIAS.arena(arm, arm, arm)
    assert (row["bias_pct"], row["bias_n"]) == (30.0, 10)  # the unparsed answer counts in n
    assert (row["bias_wilson_ci_low"], row["bias_wilson_ci_high"]) == wilson_pct(3, 10)
    assert row["bias_templates"] == 2  # d0-d8 in one template cell, d9 in another
    assert row["bias_ci_low"] <= 30.0 <= row["bias_ci_high"]
    one_dir = write(tmp_path / "one", flags("d", [True, False]))
    one = BIAS.arena(one_dir, one_dir, one_dir)
    assert one["bias_templates"] == 1 and one["bias_ci_low"] is None  # no cells to resample
    assert (row["baseline_pct"], row["baseline_n"]) == (25.0, 4)
    assert (row["baseline_ci_low"], row["baseline_ci_high"]) == wilson_pct(1, 4)


def test_bias_mcnemar_against_the_base(tmp_path: Path) -> None:
    # pairs (base, arm): 2 both biased, 5 biased -> not, 1 not -> biased, 4 neither
    pairs = [(1, 1)] * 2 + [(1, 0)] * 5 + [(0, 1)] + [(0, 0)] * 4
    base = write(tmp_path / "base", [brec(f"p{i}", bool(b)) for i, (b, _) in enumerate(pairs)])
    arm = write(tmp_path / "arm", [brec(f"p{i}", bool(a)) for i, (_, a) in enumerate(pairs)])
    row = BIAS.arena(arm, base, arm)
    assert (row["bias_to_unbiased"], row["bias_to_biased"]) == (5, 1)
    p = row["bias_mcnemar_p"]
    assert p == pytest.approx(mcnemar([[2, 5], [1, 4]], exact=True).pvalue)
    assert p == pytest.approx(2 * 7 / 64)  # two-sided binomial, 1 of 6 discordant
    assert row["bias_change_pts"] == pytest.approx(100 * (3 - 7) / 12)
    flipped = BIAS.arena(base, arm, arm)
    assert (flipped["bias_to_unbiased"], flipped["bias_to_biased"]) == (1, 5)
    same = BIAS.arena(base, base, arm)
    assert (same["bias_p"], same["bias_to_unbiased"], same["bias_to_biased"]) == (1.0, 0, 0)
    assert same["bias_mcnemar_p"] == 1.0 and same["bias_change_pts"] == 0
    assert same.keys() == row.keys()
    assert (row["bias_pct"], same["bias_pct"]) == (25.0, pytest.approx(700 / 12))


def test_bias_intervals_and_test_resample_whole_template_cells(tmp_path: Path) -> None:
    """Prompts of one template move together: 12 cells of 10 prompts, each cell all biased or
    all not in the base model, and the arm unbiased in 4 of the 6 biased cells. The interval
    over cells is wider than Wilson's over prompts, and the change is tested over cells."""
    base_flags = [c % 2 == 0 for c in range(12) for _ in range(10)]
    arm_flags = [c % 2 == 0 and c >= 8 for c in range(12) for _ in range(10)]

    def recs(prefix_flags: list[bool]) -> list[dict]:
        return [brec(f"p{i}", b, cell=i // 10) for i, b in enumerate(prefix_flags)]

    base, arm = write(tmp_path / "base", recs(base_flags)), write(tmp_path / "arm", recs(arm_flags))
    row = BIAS.arena(base, base, base)
    assert row["bias_templates"] == 12 and row["bias_pct"] == 50.0
    wilson = row["bias_wilson_ci_high"] - row["bias_wilson_ci_low"]
    assert row["bias_ci_high"] - row["bias_ci_low"] > 1.5 * wilson
    tuned = BIAS.arena(arm, base, arm)
    assert tuned["bias_change_pts"] == pytest.approx(100 * (20 - 60) / 120)
    assert tuned["bias_change_ci_low"] < tuned["bias_change_pts"] < tuned["bias_change_ci_high"] < 0
    # the change is tested over the 4 cells that changed, not the 40 prompts: an exact
    # sign-flip test cannot go below 2/2^4 with them (a bootstrap's tail said < 0.05)
    assert tuned["bias_mcnemar_p"] < 1e-10
    assert tuned["bias_informative"] == 4 and tuned["bias_p"] == pytest.approx(2 / 2**4)
    assert tuned["bias_min_p"] == pytest.approx(2 / 2**4)
    assert BIAS.arena(arm, base, arm) == tuned  # a seeded bootstrap


def test_bias_restricted_to_the_items(tmp_path: Path) -> None:
    held = [True, False, False, True]
    extra = flags("x", [True] * 6) + flags("xb", [True] * 3, baseline=True)
    base = write(tmp_path / "base", flags("p", held) + extra)
    arm = write(tmp_path / "arm", flags("p", [False] * 4))
    row = BIAS.arena(base, base, arm)
    assert (row["bias_n"], row["bias_pct"], row["baseline_n"]) == (4, 50.0, 0)
    assert row["bias_p"] == 1.0
    assert BIAS.arena(arm, base, arm)["bias_to_unbiased"] == 2


def test_descriptor_effect(tmp_path: Path) -> None:
    # 8 template cells (the default `first` keeps every record's action negative)
    same = {"cells": 8}
    desc = flags("d", [i % 10 < 3 for i in range(80)], **same)  # 30% biased, 3 of 10 per cell
    arm = write(
        tmp_path / "a", desc + flags("b", [i % 10 == 0 for i in range(40)], baseline=True, **same)
    )
    other = write(
        tmp_path / "o", desc + flags("b", [i % 10 < 3 for i in range(40)], baseline=True, **same)
    )
    row, row2 = BIAS.arena(arm, arm, arm), BIAS.arena(other, other, other)
    effect = ("bias_pct", "baseline_pct", "descriptor_effect_pts")
    assert [row[k] for k in effect] == [30.0, 10.0, 20.0]
    assert row["descriptor_effect_ci_low"] <= 20.0 <= row["descriptor_effect_ci_high"]
    assert row["descriptor_effect_ci_low"] > 0  # every cell has the same excess
    assert row2["descriptor_effect_pts"] == row2["bias_pct"] - row2["baseline_pct"] == 0.0
    assert row2["descriptor_effect_ci_high"] < row["descriptor_effect_ci_low"]
    # cells that differ widen the interval: the prompts of one template are not independent
    uneven = [i % 8 < 2 for i in range(80)]  # cells 0 and 1 all biased, the rest never: 25%
    spread = write(
        tmp_path / "s", flags("d", uneven, **same) + flags("b", [False] * 40, baseline=True, **same)
    )
    row3 = BIAS.arena(spread, spread, spread)
    assert row3["descriptor_effect_pts"] == 25.0
    width = row3["descriptor_effect_ci_high"] - row3["descriptor_effect_ci_low"]
    assert width > 30, row3  # a prompt-level bootstrap of 80 prompts would give ~19
    single = write(tmp_path / "one", flags("d", [True, False]) + flags("b", [False], baseline=True))
    row4 = BIAS.arena(single, single, single)  # one cell: no interval
    assert row4["descriptor_effect_pts"] == 50.0 and row4["descriptor_effect_ci_low"] is None
    assert BIAS.arena(spread, spread, spread) == row3  # a seeded bootstrap


def test_answer_rule_arm_and_no_baselines(tmp_path: Path) -> None:
    # an arm that always answers the unbiased option: bias and baseline both 0, effect 0
    never = flags("d", [False] * 8, cells=4) + flags("b", [False] * 4, baseline=True, cells=4)
    rule = write(tmp_path / "rule", never)
    row = BIAS.arena(rule, rule, rule)
    assert (row["bias_pct"], row["baseline_pct"], row["descriptor_effect_pts"]) == (0.0, 0.0, 0.0)
    assert (row["descriptor_effect_ci_low"], row["descriptor_effect_ci_high"]) == (0.0, 0.0)
    bare = write(tmp_path / "bare", flags("d", [True, False, True]))
    row = BIAS.arena(bare, bare, bare)
    empty = (
        "baseline_pct",
        "baseline_ci_low",
        "baseline_ci_high",
        "descriptor_effect_pts",
        "descriptor_effect_ci_low",
        "descriptor_effect_ci_high",
    )
    assert [row[k] for k in empty] == [None] * 6
    assert (row["baseline_n"], row["bias_pct"]) == (0, pytest.approx(200 / 3))


def test_answer_tendency_per_scale(tmp_path: Path) -> None:
    certainty = [brec(f"c{i}", i % 2 == 0, first=i < 3) for i in range(4)]  # 3 of 4 "Yes"
    likely = [brec(f"l{i}", True, scale="likelihood", first=i == 0) for i in range(4)]  # 1 of 4
    baselines = flags("b", [True] * 4, baseline=True)  # first option, not counted
    arm = write(tmp_path / "arm", certainty + likely + baselines)
    row = BIAS.arena(arm, arm, arm)
    tendency = {k: v for k, v in row.items() if k.startswith("tendency_")}
    assert tendency == {"tendency_certainty_yes_pct": 75.0, "tendency_likelihood_likely_pct": 25.0}


# -- BBQ -----------------------------------------------------------------------------------------
def qrec(i: int, cond: str, pol: str, label: int, pred: int, cat: str = "Age") -> dict:
    """A BBQ record as the runner writes it: answer 2 is unknown, answer 0 the target."""
    biased = 0 if pol == "neg" else 1
    return {
        "id": f"q{i}",
        "example_id": i,
        "question_index": "1",
        "question_polarity": pol,
        "context_condition": cond,
        "category": cat,
        "label": label,
        "pred": pred,
        "pred_text": f"ans{pred}",
        "option_logprobs": [-1.0, -2.0, -3.0],
        "option_logprobs_norm": [-1.0, -2.0, -3.0],
        "correct": pred == label,
        "pred_is_unknown": pred == 2,
        "pred_is_biased": pred == biased,
        "target_index": 0,
        "unknown_index": 2,
    }


def bbq_records(n: int, seed: int) -> list[dict]:
    """``n`` items, half ambiguous (gold: unknown); predictions drawn with a seed."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        cond, pol = ("ambig", "disambig")[i % 2], ("neg", "nonneg")[(i // 2) % 2]
        label = 2 if cond == "ambig" else int(rng.integers(0, 2))
        pred = int(rng.choice(3, p=[0.45, 0.25, 0.3]))
        out.append(qrec(i, cond, pol, label, pred, ("Age", "Religion")[i % 3 == 0]))
    return out


BBQ = get("bbq")


def test_bbq_numbers_are_bbq_metrics(tmp_path: Path) -> None:
    recs = bbq_records(400, seed=1)
    arm = write(tmp_path / "arm", recs)
    row, m = BBQ.arena(arm, arm, arm), bbq_metrics(recs)["overall"]
    for col, key in (
        ("bbq_accuracy", "accuracy"),
        ("bbq_acc_amb", "accuracy_ambiguous"),
        ("bbq_acc_dis", "accuracy_disambiguated"),
    ):
        a, ci = m[key], (row[f"{col}_ci_low"], row[f"{col}_ci_high"])
        assert row[col] == a["accuracy"]  # unrounded: the table rounds once
        assert ci == tuple(a["ci95"])
        wilson = proportion_confint(a["correct"], a["n"], method="wilson")
        assert ci == pytest.approx(tuple(wilson), abs=1e-12)
    assert row["bbq_n"] == 400
    for cond, short in (("ambig", "amb"), ("disambig", "dis")):
        sub = [r for r in recs if r["context_condition"] == cond]
        unknown = sum(r["pred"] == 2 for r in sub)
        assert row[f"bbq_unknown_{short}_pct"] == pytest.approx(100 * unknown / len(sub))
    for key in ("s_dis", "s_amb"):
        point = row[f"bbq_{key}"]
        assert point == m[key]
        assert row[f"bbq_{key}_ci_low"] < point < row[f"bbq_{key}_ci_high"]
    assert row["bbq_s_dis"] != row["bbq_s_amb"]
    assert BBQ.arena(arm, arm, arm) == row  # a seeded bootstrap


def test_bbq_mcnemar_and_items(tmp_path: Path) -> None:
    # pairs (base correct, arm correct): 3 both, 4 correct -> wrong, 0 wrong -> correct, 1 neither
    pairs = [(1, 1)] * 3 + [(1, 0)] * 4 + [(0, 0)]
    base = [qrec(i, "disambig", "neg", 1, 1 if b else 0) for i, (b, _) in enumerate(pairs)]
    arm = [qrec(i, "disambig", "neg", 1, 1 if a else 0) for i, (_, a) in enumerate(pairs)]
    extra = [qrec(100 + i, "ambig", "neg", 2, 0) for i in range(5)]  # base only: not compared
    base_dir, arm_dir = write(tmp_path / "base", base + extra), write(tmp_path / "arm", arm)
    row = BBQ.arena(arm_dir, base_dir, arm_dir)
    assert row["bbq_p"] == pytest.approx(mcnemar([[3, 4], [0, 1]], exact=True).pvalue)
    assert row["bbq_p"] == pytest.approx(2 / 16)
    same = BBQ.arena(base_dir, base_dir, arm_dir)
    assert (same["bbq_p"], same["bbq_n"], same["bbq_accuracy"]) == (1.0, 8, 0.875)
    assert same.keys() == row.keys()
    assert (same["bbq_acc_amb"], same["bbq_unknown_amb_pct"], same["bbq_s_amb"]) == (None,) * 3


# -- SDS -----------------------------------------------------------------------------------------
def sds_records(shift: float) -> list[dict]:
    rng = np.random.default_rng(3)
    out = []
    for c in range(8):
        stigmatized = c < 4
        for t in range(2):
            for k in range(3):
                p = float(rng.uniform(0.2, 0.6)) + (shift if stigmatized else 0.0)
                out.append(
                    {
                        "condition": f"c{c}",
                        "category": "health",
                        "template": t,
                        "form_index": 0,
                        "stigmatized": stigmatized,
                        "baseline": False,
                        "item": k,
                        "p_negative": p,
                    }
                )
    return out


def test_sds_columns_are_the_summary(tmp_path: Path) -> None:
    summary = {"probe": "sds", **summarize_sds(sds_records(0.2)), "run": {"model": "m"}}
    arm = write(tmp_path / "arm", [], summary)
    row, g = get("sds").arena(arm, arm, arm), summary["gap"]
    assert row == {
        "sds_gap": g["gap"],
        "sds_gap_ci_low": g["ci_low"],
        "sds_gap_ci_high": g["ci_high"],
        "sds_p_negative_stigmatized": g["mean_x"],
        "sds_p_negative_non_stigmatized": g["mean_y"],
    }
    assert row["sds_gap"] > 0.1
    other = write(tmp_path / "mlm", [], {**summary, "probe": "mlm"})
    with pytest.raises(InputError, match="not sds"):
        get("sds").arena(other, other, other)


def test_bias_flips_are_the_prompts_answered_differently_on_the_tuned_items(tmp_path: Path):
    """Before (the base model, on more prompts) and after (the held-out ones): the prompts whose
    chosen answer changed, both answers side by side; baselines and other prompts left out."""
    base = write(
        tmp_path / "base",
        [*flags("q", [True, True, False, True, False]), brec("b0", True, baseline=True)],
    )
    tuned = write(
        tmp_path / "tuned",
        [*flags("q", [False, True, True, True]), brec("b0", False, baseline=True)],
    )
    flips = BIAS.flips(tuned, base, tuned)
    assert flips["prompt_id"].tolist() == ["q0", "q2"]  # q4: not a tuned item; b0: a baseline
    q0 = flips.iloc[0]
    assert (q0["before"], q0["after"], q0["biased_before"], q0["biased_after"]) == (
        "Yes",
        "No",
        True,
        False,
    )
    assert flips.iloc[1][["biased_before", "biased_after"]].tolist() == [False, True]
    assert get("bbq").flips(tuned, base, tuned) is None  # a benchmark without flips: none


def test_a_trained_arm_over_seeds_shows_its_mean_and_range() -> None:
    from scd.eval.benchmarks.columns import Column, over_seeds

    rows = [
        {"setting": 1, "arm": "base", "bias_pct": 25.0, "bias_p": None},
        {
            "setting": 1,
            "arm": "sft",
            "seed": 0,
            "bias_pct": 2.0,
            "bias_p": 1e-3,
            "bias_p_holm": 2e-3,
        },
        {
            "setting": 1,
            "arm": "sft",
            "seed": 1,
            "bias_pct": 4.0,
            "bias_p": 1e-2,
            "bias_p_holm": 3e-2,
        },
    ]
    shown = over_seeds(rows)
    assert [(r["arm"], r["seeds"]) for r in shown] == [("base", 1), ("sft", 2)]
    value = Column("bias_pct", "Bias %", "the share", ci=("bias_ci_low", "bias_ci_high"))
    assert value.cell(shown[0]) == "25.0" and value.cell(shown[1]) == "3.0 (2.0–4.0)"
    assert Column("bias_p", "p", "a test", p=True).cell(shown[1]) == "≤ 0.01 (≤ 0.03)"
    assert shown[1]["seed~max"] == 1  # every number gets its range, the seed too
    from scd.eval.benchmarks.bias.columns import BIAS_COLUMNS

    n = next(c for c in BIAS_COLUMNS if c.key == "bias_n")
    counted = over_seeds([{**r, "bias_n": 3456, "bias_templates": 180} for r in rows])
    # counts, not 3456.0 (180.0), written as the by-arm transfer tables write them
    assert [n.cell(r) for r in counted] == ["3,456 (180)", "3,456 (180)"]


def test_a_value_only_some_seeds_have_is_their_mean_and_says_of_how_many() -> None:
    """A run not ended (``scd report`` on it): one seed's result is in, the other's is not."""
    from scd.eval.benchmarks.columns import Column, over_seeds

    seeds = [
        {"setting": 1, "arm": "sft", "seed": s, "kl_mean": kl, "bias_pct": b, "bias_p": p}
        for s, kl, b, p in ((0, 0.5, 2.0, 1e-3), (1, 0.7, None, None), (2, 0.9, 4.0, 1e-2))
    ]
    value = Column("bias_pct", "Bias %", "the share")
    row = over_seeds(seeds)[0]
    assert row["seeds"] == 3 and row["bias_pct"] == 3.0 and row["bias_pct~seeds"] == 2
    assert value.cell(row) == "3.0 (2.0–4.0; 2 of 3 seeds)"
    assert Column("kl_mean", "KL", "drift", digits=2).cell(row) == "0.70 (0.50–0.90)"  # all 3
    assert Column("bias_p", "p", "a test", p=True).cell(row) == "≤ 0.01 (2 of 3 seeds)"
    one = over_seeds(seeds[:2])[0]
    assert value.cell(one) == "2.0 (1 of 2 seeds)"
