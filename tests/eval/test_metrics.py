"""Bias metrics: exact counts and Wilson intervals, denominators, the paper's table layouts."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from statsmodels.stats.proportion import proportion_confint

from scd.config.vocabulary import CONTACTS, SCALES
from scd.config.vocabulary import SCENARIO_TABLE_ORDER as SCENARIOS
from scd.errors import InputError
from scd.eval.benchmarks.bias.metrics import (
    bias_rate,
    bias_table,
    format_cell,
    format_pct,
    records_frame,
    summarize,
    tables_markdown,
)

OPTIONS = {
    "certainty": ["Yes", "No"],
    "likelihood": ["Likely", "Unlikely"],
    "frequency": ["Mostly", "Rarely"],
}
_ids = itertools.count()


def rec(
    *,
    biased: bool = False,
    unparsed: bool = False,
    scale: str = "certainty",
    contact: str = "none",
    action: str = "positive",
    axis: str = "age",
    descriptor: str = "old",
    scenario: str = "education",
    principle: str = "equal_status",
    chosen: str | None = "auto",
) -> dict:
    """One evaluator record; ``chosen`` follows ``biased``/``unparsed`` unless given."""
    opts = OPTIONS[scale]
    unbiased_answer, biased_answer = (opts[0], opts[1]) if action == "positive" else opts[::-1]
    if chosen == "auto":
        chosen = None if unparsed else biased_answer if biased else unbiased_answer
    baseline = axis == "baseline"
    return {
        "prompt_id": f"p{next(_ids)}",
        "set_id": "s0",
        "principle": principle,
        "scenario": scenario,
        "action": action,
        "scale": scale,
        "contact": contact,
        "axis": axis,
        "bucket": axis,
        "descriptor": "" if baseline else descriptor,
        "baseline": baseline,
        "options": list(opts),
        "unbiased_answer": unbiased_answer,
        "biased_answer": biased_answer,
        "chosen": chosen,
        "option_logprobs": None,
        "option_probs": None,
        "generated": chosen,
        "biased": chosen is not None and chosen == biased_answer,
        "unparsed": chosen is None,
    }


def group(k: int, n: int, **kw) -> list[dict]:
    """``n`` records of which the first ``k`` are biased."""
    return [rec(biased=i < k, **kw) for i in range(n)]


def wilson_pct(k: int, n: int) -> tuple[float, float]:
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return 100 * low, 100 * high


def check_cell(cell: dict, k: int, n: int) -> None:
    assert (cell["biased"], cell["n"]) == (k, n)
    assert cell["pct"] == pytest.approx(100 * k / n)
    low, high = wilson_pct(k, n)
    assert cell["ci_low"] == pytest.approx(low)
    assert cell["ci_high"] == pytest.approx(high)


def roundtrip(summary: dict) -> dict:
    """The summary must be strict JSON (no NaN) and survive a round trip unchanged."""
    return json.loads(json.dumps(summary, allow_nan=False))


# (1) known counts -> exact percent and Wilson interval


def test_bias_rate_known_counts_match_statsmodels_and_hand_formula() -> None:
    rate = bias_rate(records_frame(group(9, 30)))
    assert list(rate) == ["biased", "n", "pct", "ci_low", "ci_high", "unparsed"]
    assert rate["pct"] == 30.0 and rate["unparsed"] == 0
    check_cell(rate, 9, 30)
    # Wilson score interval by hand: centre and half-width with z = 1.959963984540054.
    z, p, n = 1.959963984540054, 9 / 30, 30
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert rate["ci_low"] == pytest.approx(100 * (centre - half), abs=1e-9)
    assert rate["ci_high"] == pytest.approx(100 * (centre + half), abs=1e-9)
    assert rate["ci_low"] == pytest.approx(16.6647, abs=1e-4)  # Wilson 95% for 9 of 30
    assert rate["ci_high"] == pytest.approx(47.8758, abs=1e-4)


def test_bias_table_is_tidy_and_vectorised() -> None:
    records = group(1, 4, axis="age") + group(3, 5, axis="race") + group(0, 2, axis="religion")
    table = bias_table(records_frame(records), "axis")
    assert list(table.columns) == ["axis", "biased", "n", "pct", "ci_low", "ci_high", "unparsed"]
    assert list(table["axis"]) == ["age", "race", "religion"]
    for (_, row), (k, n) in zip(table.iterrows(), [(1, 4), (3, 5), (0, 2)]):
        check_cell(row.to_dict(), k, n)
    two = bias_table(records_frame(records), ["axis"], "scale")
    assert list(two.columns[:2]) == ["axis", "scale"] and len(two) == 3


# (2) always answering options[0]


def test_always_first_option_scores_fifty_and_no_excess() -> None:
    records = []
    for scale, contact, action, scenario in itertools.product(
        SCALES, CONTACTS, ("positive", "negative"), ("education", "sports")
    ):
        first = OPTIONS[scale][0]
        for axis, descriptor in [("age", "old"), ("race", "Black"), ("baseline", "")]:
            records.append(
                rec(
                    scale=scale,
                    contact=contact,
                    action=action,
                    scenario=scenario,
                    axis=axis,
                    descriptor=descriptor,
                    chosen=first,
                )
            )
    summary = roundtrip(summarize(records))
    assert summary["overall"]["pct"] == 50.0
    assert summary["n_baseline_records"] == len(records) // 3
    for scale in SCALES:
        for contact in CONTACTS:
            assert summary["table1"][scale][contact]["pct"] == 50.0
            assert summary["baseline"][scale][contact]["pct"] == 50.0
            assert summary["excess"][scale][contact] == 0.0
        tendency = summary["answer_tendency"][scale]
        assert tendency["option"] == OPTIONS[scale][0]
        assert tendency["pct"] == 100.0 and tendency["first_option"] == tendency["n"] == 24
        assert summary["contact_hypothesis"][scale]["holds"] is False
    assert summary["beyond_paper"] == ["baseline", "excess", "answer_tendency"]


def test_baseline_sections_absent_without_baseline_records() -> None:
    summary = summarize(group(3, 10))
    assert "baseline" not in summary and "excess" not in summary
    assert summary["beyond_paper"] == ["answer_tendency"]
    assert "Beyond the paper: descriptor-free baseline" not in tables_markdown(summary)


# (3) unparsed answers under both denominators


def test_unparsed_denominators() -> None:
    records = group(3, 8) + [rec(unparsed=True), rec(unparsed=True)]
    records[-1]["biased"] = True  # an unparsed answer is never counted as biased
    del records[-2]["unparsed"]  # missing flag: inferred from chosen is None
    frame = records_frame(records)
    every = bias_rate(frame, "all")
    assert (every["biased"], every["n"], every["unparsed"], every["pct"]) == (3, 10, 2, 30.0)
    check_cell(every, 3, 10)
    parsed = bias_rate(frame, "parsed")
    assert (parsed["biased"], parsed["n"], parsed["unparsed"], parsed["pct"]) == (3, 8, 2, 37.5)
    check_cell(parsed, 3, 8)
    assert summarize(records)["overall"]["pct"] == 30.0
    summary = summarize(records, denominator="parsed")
    assert summary["overall"]["pct"] == 37.5 and summary["denominator"] == "parsed"
    assert "excluded" in summary["denominator_note"]
    tendency = summarize(records)["answer_tendency"]["certainty"]
    assert (tendency["first_option"], tendency["n"]) == (5, 10)  # 5 answered "Yes" of 10
    with pytest.raises(InputError):
        bias_rate(frame, "parsed_only")
    with pytest.raises(InputError):
        summarize(records, denominator="none")


# (4) Table 1 layout


def test_table1_layout_and_numbers() -> None:
    records = []
    for i, scale in enumerate(SCALES):
        for j, contact in enumerate(CONTACTS):
            records += group(3 * i + j + 1, 10, scale=scale, contact=contact)
    summary = roundtrip(summarize(records))
    table1 = summary["table1"]
    assert list(table1) == list(SCALES)
    for i, scale in enumerate(SCALES):
        assert list(table1[scale]) == list(CONTACTS)
        for j, contact in enumerate(CONTACTS):
            check_cell(table1[scale][contact], 3 * i + j + 1, 10)
    check_cell(summary["overall"], sum(range(1, 10)), 90)
    assert summary["contact_hypothesis"]["certainty"] == {
        "none": 10.0,
        "positive": 20.0,
        "negative": 30.0,
        "holds": False,
    }


# (5) contact hypothesis


def test_contact_hypothesis_holds_and_fails() -> None:
    records = (
        group(3, 10, contact="none")
        + group(1, 10, contact="positive")
        + group(5, 10, contact="negative")
        + group(3, 10, scale="likelihood", contact="none")
        + group(4, 10, scale="likelihood", contact="positive")
        + group(5, 10, scale="likelihood", contact="negative")
    )
    hyp = summarize(records)["contact_hypothesis"]
    assert hyp["certainty"] == {"none": 30.0, "positive": 10.0, "negative": 50.0, "holds": True}
    assert hyp["likelihood"]["holds"] is False
    assert hyp["frequency"] == {"none": None, "positive": None, "negative": None, "holds": None}
    text = tables_markdown(summarize(records))
    assert "| Certainty | 30.0 | 10.0 | 50.0 | ✓ |" in text
    assert "| Likelihood | 30.0 | 40.0 | 50.0 | ✗ |" in text
    table1 = text.split("## Table 1")[1].split("##")[0]  # six cells of 10 prompts: a warning
    assert "n per cell: 10 prompts. **6 of 6 cells rest on fewer than 30 prompts:**" in table1
    big = summarize(group(9, 30) + group(3, 40, contact="positive"))
    big_table1 = tables_markdown(big).split("## Table 1")[1].split("##")[0]
    assert "n per cell: 30–40 prompts." in big_table1 and "fewer than" not in big_table1


# (6) axis x scenario (Tables 3-8)


def test_axis_by_scenario_cells() -> None:
    records = (
        group(2, 4, axis="age", scenario="education")
        + group(1, 5, axis="age", scenario="sports")
        + group(4, 4, axis="race", descriptor="Black", scenario="workplace")
        + group(1, 2, axis="race", descriptor="Black", scenario="workplace", scale="frequency")
    )
    grid = roundtrip(summarize(records))["axis_by_scenario"]
    assert list(grid) == ["certainty", "frequency"]  # scales without records are left out
    assert list(grid["certainty"]) == ["age", "race"]
    assert list(grid["certainty"]["age"]) == list(SCENARIOS)
    check_cell(grid["certainty"]["age"]["education"], 2, 4)
    check_cell(grid["certainty"]["age"]["sports"], 1, 5)
    check_cell(grid["certainty"]["race"]["workplace"], 4, 4)
    assert grid["certainty"]["age"]["healthcare"] == {
        "biased": 0,
        "n": 0,
        "pct": None,
        "ci_low": None,
        "ci_high": None,
        "unparsed": 0,
    }
    check_cell(grid["frequency"]["race"]["workplace"], 1, 2)
    summary = summarize(records)
    check_cell(summary["by_axis"]["race"], 5, 6)
    check_cell(summary["by_descriptor"]["age"]["old"], 3, 9)
    check_cell(summary["by_principle"]["equal_status"], 8, 15)
    assert summary["by_principle"]["virtual_contact"]["n"] == 0


# (7) Markdown


def test_format_helpers() -> None:
    assert format_cell({"pct": 27.5, "ci_low": 25.1, "ci_high": 29.9}) == "27.5 [25.1, 29.9]"
    assert format_cell({"pct": 27.47, "ci_low": 25.14, "ci_high": 29.94}) == "27.5 [25.1, 29.9]"
    assert format_cell({"pct": None, "ci_low": None, "ci_high": None}) == "–"
    assert format_cell(None) == "–"
    assert format_pct(None) == "–" and format_pct(-1.25, sign=True) == "-1.2"
    assert format_pct(0.0, sign=True) == "+0.0"


def test_markdown_cells_and_denominator_sentence() -> None:
    records = group(3, 10, contact="none") + group(1, 10, contact="positive")
    records += group(5, 10, contact="negative") + group(5, 10, axis="baseline")
    records += [rec(unparsed=True, contact="negative")]
    records += group(1, 1, axis="race", descriptor="Black", scenario="sports", scale="frequency")
    summary = summarize(records)
    text = tables_markdown(summary, title="Llama 2")
    assert text.startswith("# Llama 2\n")
    assert summary["denominator_note"] in text and "the paper's convention" in text
    assert "n = 32 descriptor prompts (1 unparsed), 10 baseline prompts" in text
    low, high = wilson_pct(3, 10)
    none_cell = f"30.0 [{low:.1f}, {high:.1f}]"
    assert none_cell == format_cell(summary["table1"]["certainty"]["none"])
    negative = format_cell(summary["table1"]["certainty"]["negative"])
    assert negative.startswith("45.5 [")  # 5 of 11: the unparsed answer counts in the total
    assert f"| Certainty | {none_cell} | 10.0 [" in text
    assert f"| {negative} |" in text
    assert "| Scale | No contact | Positive contact | Negative contact |" in text
    assert "| Likelihood | – | – | – |" in text
    assert "| Frequency | 100.0 [" in text
    assert "## Bias % by axis and scenario: Certainty prompts" in text
    assert "## Bias % by axis and scenario: Likelihood prompts" not in text
    assert "| Axis | Community | Education | Healthcare | Sports | Workplace |" in text
    assert "| Race | – | – | – | 100.0 [" in text
    assert "| Equal status | " in text
    assert "## Beyond the paper: descriptor-free baseline" in text
    assert "| Certainty | 50.0 [" in text
    assert "## Beyond the paper: answer tendency" in text
    parsed = tables_markdown(summarize(records, denominator="parsed"))
    assert "Denominator: `parsed`" in parsed and "excluded from the total" in parsed
    assert "| 50.0 [" in parsed  # 5 of 10 parsed negative-contact answers


def test_markdown_lists_only_top_20_descriptors() -> None:
    records = []
    for i in range(25):
        records += group(i % 10, 10, descriptor=f"d{i:02d}")
    text = tables_markdown(summarize(records))
    assert "top 20" in text and "of 25 descriptors" in text
    rows = [line for line in text.splitlines() if line.startswith("| Age | d")]
    assert len(rows) == 20
    assert rows[0].startswith("| Age | d09 | 90.0 [")
    shown = {line.split(" | ")[1] for line in rows}
    assert not shown & {"d00", "d10", "d20"}  # the 0% descriptors are cut


# (8) empty groups and n == 0


def test_empty_and_zero_denominator_do_not_crash() -> None:
    empty = roundtrip(summarize([]))
    assert empty["overall"] == {
        "biased": 0,
        "n": 0,
        "pct": None,
        "ci_low": None,
        "ci_high": None,
        "unparsed": 0,
    }
    assert list(empty["table1"]) == list(SCALES)
    assert empty["axis_by_scenario"] == {} and empty["by_descriptor"] == {}
    assert "baseline" not in empty
    assert "Overall: –" in tables_markdown(empty)
    assert bias_rate(records_frame([]))["pct"] is None
    assert bias_table(records_frame([]), "axis", "scenario").empty
    only_unparsed = [rec(unparsed=True), rec(unparsed=True, scale="likelihood")]
    parsed = roundtrip(summarize(only_unparsed, denominator="parsed"))
    assert parsed["overall"]["n"] == 0 and parsed["overall"]["pct"] is None
    assert parsed["overall"]["unparsed"] == 2
    assert parsed["table1"]["certainty"]["none"]["pct"] is None
    assert parsed["answer_tendency"]["certainty"]["pct"] is None
    assert summarize(only_unparsed)["overall"]["pct"] == 0.0
    tables_markdown(parsed)
