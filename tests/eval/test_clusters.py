"""The cluster statistics (scd.eval.benchmarks.clusters) are honest: the exact sign-flip test
equals scipy's permutation test, holds its level on simulated nulls whose prompts share their
template's rate (where a McNemar test over prompts does not), finds an effect of the size SCD
shows, can disagree with itself between the two cluster units, and gives a rate of 0 an
interval that is not [0, 0]."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar

from scd.eval.benchmarks.clusters import cluster_change, cluster_rate, sign_flip_test, unit_keys


def _scipy_p(d: np.ndarray, alternative: str) -> float:
    return stats.permutation_test(
        (d.astype(float),),
        lambda x, axis=-1: x.sum(axis),
        permutation_type="samples",  # one sample: the signs are flipped
        n_resamples=np.inf,
        alternative=alternative,
        vectorized=True,
    ).pvalue


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_sign_flip_test_equals_scipys_exact_permutation_test(alternative: str) -> None:
    rng = np.random.default_rng(0)
    for size in range(2, 13):  # scipy takes two observations or more
        for _ in range(5):
            d = rng.integers(-4, 5, size)
            ours = sign_flip_test(d, alternative)
            assert ours["p"] == pytest.approx(_scipy_p(d, alternative), abs=1e-12), (d, ours)
            assert ours["informative"] == int(np.count_nonzero(d))


def test_the_smallest_p_is_two_over_two_to_the_informative_clusters() -> None:
    # the re-analysis of the SCD run: 7 cells carry any bias, every one falls to 0
    test = sign_flip_test([-3, -1, -2, -1, -4, -1, -2, 0, 0, 0])
    assert test["p"] == pytest.approx(2 / 2**7) == test["min_p"]
    assert test["informative"] == 7
    assert sign_flip_test([0, 0, 0]) == {"p": 1.0, "informative": 0, "min_p": 1.0}
    with pytest.raises(ValueError, match="whole counts"):
        sign_flip_test([0.5, 1])


def _null_datasets(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` (base, arm) answer sets of 30 templates x 12 prompts, each template's rate drawn
    apart for the two models from one Beta(2, 5): no effect, but prompts share their template's
    rate."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = rng.binomial(1, np.repeat(rng.beta(2, 5, 30), 12))
        arm = rng.binomial(1, np.repeat(rng.beta(2, 5, 30), 12))
        out.append((base, arm))
    return out


def test_the_cluster_test_rejects_about_five_percent_of_simulated_nulls() -> None:
    data = _null_datasets(2000, seed=1)
    clustered = [sign_flip_test((a - b).reshape(30, 12).sum(1))["p"] < 0.05 for b, a in data]
    by_prompt = [
        mcnemar([[0, int((b > a).sum())], [int((a > b).sum()), 0]], exact=True).pvalue < 0.05
        for b, a in data[:500]
    ]
    assert 0.03 <= np.mean(clustered) <= 0.07, np.mean(clustered)
    assert np.mean(by_prompt) > 0.10  # a test that treats the prompts as independent does not


def test_the_cluster_test_finds_an_effect_of_the_size_scd_shows() -> None:
    """30 templates x 6 held-out prompts, the base model biased on ~13% of them (rates drawn
    per template from Beta(0.5, 3.35): a few templates carry most of it, as in the runs), the
    arm on none."""
    rng = np.random.default_rng(2)
    found = []
    for _ in range(2000):
        base = rng.binomial(6, rng.beta(0.5, 3.35, 30))
        found.append(sign_flip_test(-base)["p"] < 0.05)
    assert np.mean(found) > 0.80, np.mean(found)


def test_cell_and_template_clustering_can_disagree() -> None:
    """4 templates x 2 actions: the arm has one biased answer fewer in each of the 8 cells.
    Eight cells that all fall give p = 2/2^8; four templates that all fall give 2/2^4."""
    rows = [
        {"principle": f"p{t}", "scenario": "s", "action": a, "scale": "certainty", "k": k}
        for t in range(4)
        for a in ("positive", "negative")
        for k in range(3)
    ]
    before = [r["k"] == 0 for r in rows]  # one biased answer per cell
    after = [False] * len(rows)

    def p(unit: str) -> float:
        keys = unit_keys(unit)
        return cluster_change(after, before, [tuple(r[k] for k in keys) for r in rows])["p"]

    assert p("cell") == pytest.approx(2 / 2**8)  # below 0.05
    assert p("template") == pytest.approx(2 / 2**4)  # above 0.05


def test_a_rate_of_zero_has_an_interval_that_is_not_zero_width() -> None:
    clusters = [i // 6 for i in range(180)]
    zero = cluster_rate([False] * 180, clusters)
    assert zero["pct"] == 0 and zero["ci_low"] == 0 and 5 < zero["ci_high"] < 15  # Wilson, n=30
    whole = cluster_rate([True] * 180, clusters)
    assert whole["pct"] == 100 and 85 < whole["ci_low"] < 95 and whole["ci_high"] == 100
    some = cluster_rate([i % 7 == 0 for i in range(180)], clusters)
    assert some["ci_low"] < some["pct"] < some["ci_high"]
