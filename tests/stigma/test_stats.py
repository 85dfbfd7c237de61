"""Every statistic against scipy/numpy or a naive formula on known inputs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from scd.eval.benchmarks.stigma.stats import (
    cronbach_alpha,
    gap,
    mental_vs_physical,
    p_negative,
    pearson,
)


def test_p_negative_formula_of_seed_002() -> None:
    assert p_negative({"positive": 0.2, "negative": 0.3, "neutral": 0.1, "irrelevant": 5}) == (
        pytest.approx(0.5)
    )
    assert p_negative({"irrelevant": 0.4}) is None


def test_gap_mean_difference_welch_and_ci() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.7, 0.1, 40), rng.normal(0.4, 0.1, 15)
    g = gap(x, y, seed=1)
    assert g["gap"] == pytest.approx(x.mean() - y.mean())
    # Welch's t by hand
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    t = (x.mean() - y.mean()) / np.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    assert g["p_welch"] == pytest.approx(2 * stats.t.sf(abs(t), df))
    assert g["ci_low"] < g["gap"] < g["ci_high"]
    se = np.sqrt(vx + vy)  # the bootstrap CI is close to the normal one here
    assert g["ci_low"] == pytest.approx(g["gap"] - 1.96 * se, abs=0.03)
    assert g["ci_high"] == pytest.approx(g["gap"] + 1.96 * se, abs=0.03)
    assert gap([1.0], [0.0])["ci_low"] is None and gap([0.5] * 3, [0.5] * 3)["gap"] == 0


def test_cronbach_alpha_against_covariance_formula() -> None:
    rng = np.random.default_rng(0)
    latent = rng.normal(size=(50, 1))
    m = latent + rng.normal(scale=0.5, size=(50, 3))
    cov = np.cov(m, rowvar=False)
    k = 3
    mean_var, mean_cov = np.mean(np.diag(cov)), cov[~np.eye(k, dtype=bool)].mean()
    naive = k * mean_cov / (mean_var + (k - 1) * mean_cov)
    assert cronbach_alpha(m) == pytest.approx(naive)
    assert cronbach_alpha(np.repeat(latent, 3, axis=1)) == pytest.approx(1.0)
    assert cronbach_alpha(m[:, :1]) is None


def _frames(diff_by_dim: dict[str, float], rng: np.random.Generator) -> list[dict]:
    frames = []
    for d, shift in diff_by_dim.items():
        for item in range(3):
            for noun in ("a", "b", "c", "d", "e", "f"):
                base = rng.normal()
                frames.append(
                    {
                        "dimension": d,
                        "item": f"{d}{item}",
                        "noun_phrase": noun,
                        "scores": {
                            "mental": {"m1": base + shift + rng.normal(0, 0.1), "m2": base + shift},
                            "physical": {"p1": base + rng.normal(0, 0.1), "p2": base},
                        },
                    }
                )
    return frames


def test_wilcoxon_and_bonferroni_against_scipy() -> None:
    frames = _frames({"anger": 1.0, "fear": 0.0, "pity": -0.5}, np.random.default_rng(1))
    res = mental_vs_physical(frames, ["anger", "fear", "pity"])
    for dim in ("anger", "fear", "pity"):
        sub = [f for f in frames if f["dimension"] == dim]
        m = np.array([np.mean(list(f["scores"]["mental"].values())) for f in sub])
        p = np.array([np.mean(list(f["scores"]["physical"].values())) for f in sub])
        want = stats.wilcoxon(m, p)
        got = res["dimensions"][dim]
        assert got["p"] == pytest.approx(want.pvalue)
        assert got["p_bonferroni"] == pytest.approx(min(1.0, 3 * want.pvalue))
        assert got["mean_diff"] == pytest.approx((m - p).mean())
        assert got["n"] == 18 and got["n_items"] == 3
    assert res["dimensions"]["anger"]["mean_diff"] > 0.9
    assert res["dimensions"]["pity"]["mean_diff"] < -0.4
    assert res["overall"]["n"] == len(frames)


def test_pearson_against_numpy() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=30)
    y = 0.8 * x + rng.normal(scale=0.5, size=30)
    r = pearson(x, y)
    assert r["r"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert r["ci_low"] < r["r"] < r["ci_high"]
    assert pearson([1, 2], [2, 3])["r"] is None


def test_a_difference_of_float_rounding_is_a_tie_not_a_bias() -> None:
    """Every frame's mental mean 2e-6 nats above its physical one (a float32 sum's rounding,
    which moves with the names' token counts) is no difference; with six real differences
    among them the test is scipy's on those six and the rest as zeros (which it drops)."""
    frames = _frames({"anger": 0.0}, np.random.default_rng(2))
    for f in frames:
        f["scores"]["mental"] = {k: v + 2e-6 for k, v in f["scores"]["physical"].items()}
    res = mental_vs_physical(frames, ["anger"])
    assert res["dimensions"]["anger"]["p"] is None and res["overall"]["p"] is None
    assert res["overall"]["mean_diff"] == pytest.approx(2e-6)  # described as it is
    real = [dict(f, scores=dict(f["scores"])) for f in frames]
    for f, shift in zip(real[:6], (0.5, 0.7, 0.2, 0.9, 0.4, 0.6)):
        f["scores"]["mental"] = {k: v + shift for k, v in f["scores"]["physical"].items()}
    got = mental_vs_physical(real, ["anger"])["overall"]["p"]
    zeros = [0.0] * (len(real) - 6)
    assert got == pytest.approx(stats.wilcoxon([0.5, 0.7, 0.2, 0.9, 0.4, 0.6, *zeros]).pvalue)
    assert got < 0.05
