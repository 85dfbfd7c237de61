"""WinoBias's gap against the base model, paired per sentence pair (``gap_change``)."""

from __future__ import annotations

import numpy as np
import pytest

from scd.eval.benchmarks.gap_change import gap_change


def records(pro: list[int], anti: list[int]) -> list[dict]:
    return [
        {"pair": f"type1-{i}", "kind": kind, "correct": bool(c)}
        for kind, cs in (("pro", pro), ("anti", anti))
        for i, c in enumerate(cs)
    ]


def test_the_same_answers_change_nothing_and_a_widened_gap_is_found() -> None:
    base = records([1] * 40, [1] * 40)
    assert gap_change(base, base, "pair", ("pro", "anti"))["p"] == 1.0
    # the arm gets the anti version of 10 pairs wrong: the gap widens by 25 points on 10 pairs
    arm = records([1] * 40, [0] * 10 + [1] * 30)
    out = gap_change(arm, base, "pair", ("pro", "anti"))
    assert out["pts"] == pytest.approx(25.0) and out["n"] == 40 and out["informative"] == 10
    assert out["p"] == pytest.approx(2 / 2**10)  # all ten changes one way: the test's floor
    # the other way round is as surprising
    assert gap_change(base, arm, "pair", ("pro", "anti"))["p"] == pytest.approx(out["p"])


def test_only_pairs_both_answered_in_full_count() -> None:
    base = records([1, 1, 1], [1, 1, 1])
    arm = records([1, 1, 1], [0, 0, 0])
    arm = [r for r in arm if not (r["pair"] == "type1-2" and r["kind"] == "anti")]
    out = gap_change(arm, base, "pair", ("pro", "anti"))
    assert out["n"] == 2 and out["pts"] == pytest.approx(100.0)
    empty = gap_change([], base, "pair", ("pro", "anti"))
    assert empty["pts"] is None and empty["p"] == 1.0


def test_the_p_value_is_scipys_exact_paired_permutation_test() -> None:
    from scipy import stats

    n = 12  # small enough for scipy to enumerate all 2^12 sign vectors
    rng = np.random.default_rng(3)
    for _ in range(5):
        base = records(list(rng.integers(0, 2, n)), list(rng.integers(0, 2, n)))
        arm = records(list(rng.integers(0, 2, n)), list(rng.integers(0, 2, n)))
        out = gap_change(arm, base, "pair", ("pro", "anti"))

        def gaps(rs: list[dict]) -> np.ndarray:
            right = {(r["pair"], r["kind"]): int(r["correct"]) for r in rs}
            pairs = sorted({r["pair"] for r in rs})
            return np.array([right[(p, "pro")] - right[(p, "anti")] for p in pairs])

        ref = stats.permutation_test(
            (gaps(arm), gaps(base)),
            lambda x, y: np.sum(x - y),
            permutation_type="samples",
            alternative="two-sided",
            n_resamples=np.inf,
        )
        assert out["p"] == pytest.approx(min(1.0, ref.pvalue), abs=1e-9)
