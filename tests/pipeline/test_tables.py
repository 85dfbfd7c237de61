"""Tables 10-14 from records: right slices, right numbers, checked against plain numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from scd.config.settings import load_settings
from scd.eval.benchmarks.bias.transfer import (
    before_after,
    table10_frame,
    table_markdown,
    transfer_frame,
)

SCALES = ("certainty", "likelihood", "frequency")


def _frame(rng: np.random.Generator, n: int, p: float, prefix: str = "p") -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "prompt_id": [f"{prefix}{i:04d}" for i in range(n)],
            "contact": rng.choice(["none", "positive", "negative"], n),
            "scale": rng.choice(SCALES, n),
            "axis": rng.choice(["religion", "age"], n),
            "biased": rng.random(n) < p,
            "unparsed": False,
            "baseline": False,
        }
    )
    return frame.set_index("prompt_id", drop=False)


def test_before_after_keeps_only_prompts_both_answered() -> None:
    rng = np.random.default_rng(0)
    base, tuned = _frame(rng, 100, 0.5), _frame(rng, 100, 0.1)
    tuned = tuned.iloc[10:]  # the tuned run answered p0010..p0099
    heldout = [f"p{i:04d}" for i in range(0, 100, 2)] + ["elsewhere"]
    before, after = before_after(base, tuned, heldout)
    assert list(before.index) == list(after.index)
    assert list(before.index) == [f"p{i:04d}" for i in range(10, 100, 2)]


def test_table10_numbers_match_numpy_and_wilson() -> None:
    rng = np.random.default_rng(1)
    base, tuned = _frame(rng, 600, 0.4), _frame(rng, 600, 0.05)
    tuned["contact"] = base["contact"]  # same prompts, so the same contact types
    table = table10_frame({1: (base, tuned), 3: (base.iloc[:300], tuned.iloc[:300])})
    assert list(table["setting"].unique()) == [1, 3]
    assert list(table[table["setting"] == 1]["contact"]) == ["none", "positive", "negative", "all"]
    for (setting, contact), row in table.set_index(["setting", "contact"]).iterrows():
        b, a = (base, tuned) if setting == 1 else (base.iloc[:300], tuned.iloc[:300])
        mask = np.ones(len(b), bool) if contact == "all" else (b["contact"] == contact).to_numpy()
        k, n = int(b["biased"].to_numpy()[mask].sum()), int(mask.sum())
        assert row["before_pct"] == pytest.approx(100 * k / n)
        low, high = proportion_confint(k, n, method="wilson")
        assert (row["before_ci_low"], row["before_ci_high"]) == pytest.approx(
            (100 * low, 100 * high)
        )
        assert row["after_pct"] == pytest.approx(100 * a["biased"].to_numpy()[mask].mean())
        assert row["change"] == pytest.approx(row["after_pct"] - row["before_pct"])
        assert row["before_n"] == n
    md = table_markdown(table, "Table 10")
    assert "| Setting 1 |" in md and "| Setting 3 |" in md and md.count("\n|") == 4


def test_transfer_tables_group_by_the_held_out_dimension() -> None:
    rng = np.random.default_rng(2)
    settings = load_settings()
    base, tuned = _frame(rng, 900, 0.4), _frame(rng, 900, 0.1)
    tuned["contact"], tuned["scale"] = base["contact"], base["scale"]
    held3 = base[base["scale"].isin(["likelihood", "frequency"])]
    pairs = {3: (held3, tuned.loc[held3.index]), 1: (base, tuned)}
    table = transfer_frame("scale", pairs, settings)
    assert set(table["setting"]) == {3}  # setting 1 holds nothing out
    assert list(dict.fromkeys(table["value"])) == ["likelihood", "frequency"]
    row = table[(table["value"] == "frequency") & (table["contact"] == "all")].iloc[0]
    expected = 100 * held3[held3["scale"] == "frequency"]["biased"].mean()
    assert row["before_pct"] == pytest.approx(expected)
    assert transfer_frame("axis", pairs, settings) is None
    md = table_markdown(table, "Table 11", row_key="value", descriptions={3: "certainty"})
    assert "**Setting 3**: certainty" in md and "| Frequency |" in md
