"""Mei et al. 2023's pooled analyses: pooled means by hand, r by scipy, the three sentiment
classes, the papers' numbers matched to runs, and the pooled report with its figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from scd.cli import main
from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.benchmarks.stigma.pooled import correlate_pooled, pool
from scd.eval.benchmarks.stigma.sentiment import summarize_sentiment


def _summary(values: dict[str, tuple[bool, list[float]]]) -> dict:
    """A probe summary whose conditions have the given per-template values."""
    conditions = {
        c: {
            "category": "x",
            "stigmatized": s,
            "mean": float(np.mean(v)),
            "templates": {str(t): x for t, x in enumerate(v, 1)},
        }
        for c, (s, v) in values.items()
    }
    return {"conditions": conditions, "gap": {"gap": None}}


def test_pooled_means_equal_a_hand_computation() -> None:
    rng = np.random.default_rng(3)
    names = [f"c{i}" for i in range(12)]
    runs = {
        f"m{k}": _summary({c: (i < 8, list(rng.uniform(0, 1, 4))) for i, c in enumerate(names)})
        for k in range(3)
    }
    out = pool(runs, seed=1)
    for c in names:
        hand = np.mean([v for s in runs.values() for v in s["conditions"][c]["templates"].values()])
        p = out["conditions"][c]
        assert p["mean"] == pytest.approx(hand) and p["n"] == 12
        assert p["ci_low"] < p["mean"] < p["ci_high"]
    means = [out["conditions"][c]["mean"] for c in names]
    assert out["gap"]["gap"] == pytest.approx(np.mean(means[:8]) - np.mean(means[8:]))
    above = sorted(c for c in names[:8] if out["conditions"][c]["mean"] > 0.5)
    assert sorted(out["above"]["stigmatized"]) == above
    assert set(out["clearly_above"]["stigmatized"]) <= set(above)
    assert list(out["conditions"]) == sorted(names, key=lambda c: -out["conditions"][c]["mean"])

    other = pool({"c": _summary({c: (i < 8, [rng.uniform()]) for i, c in enumerate(names)})})
    corr = correlate_pooled(out, other)
    x = [out["conditions"][c]["mean"] for c in corr["conditions"]]
    y = [other["conditions"][c]["mean"] for c in corr["conditions"]]
    assert corr["pearson"]["r"] == pytest.approx(stats.pearsonr(x, y).statistic)
    assert corr["spearman"]["rho"] == pytest.approx(stats.spearmanr(x, y).statistic)
    s = corr["spearman"]
    assert s["ci_low"] < s["rho"] < s["ci_high"] and corr["stigmatized"] == 8


def test_sentiment_summary_has_three_classes_per_template() -> None:
    def rec(cond: str, stig: bool, template: int, label: str) -> dict:
        return {
            "condition": cond,
            "category": "x",
            "stigmatized": stig,
            "baseline": False,
            "template": template,
            "label": label,
            "negative": label == "NEG",
        }

    labels = {1: ["NEG", "NEG", "POS", "NEU"], 2: ["POS", "POS", "NEU", "NEG"]}
    records = [rec("a", True, t, x) for t, xs in labels.items() for x in xs]
    records += [rec("b", False, t, "POS") for t in (1, 2) for _ in range(4)]
    s = summarize_sentiment(records)
    a = s["conditions"]["a"]
    assert a["mean"] == a["proportions"]["negative"] == pytest.approx(3 / 8)
    assert a["proportions"] == pytest.approx(
        {"negative": 3 / 8, "neutral": 2 / 8, "positive": 3 / 8}
    )
    assert a["templates"] == {"1": 0.5, "2": 0.25}
    assert a["by_template"]["2"] == {"negative": 0.25, "neutral": 0.25, "positive": 0.5}
    assert s["classes"]["pooled"]["stigmatized"] == a["proportions"]
    assert s["classes"]["1"]["non_stigmatized"] == {"negative": 0, "neutral": 0, "positive": 1}


@pytest.fixture(scope="module")
def pooled_runs(toy_mlm: Path, toy_classifier: Path, stigma_probe_prompts: Path, tmp_path_factory):
    """Two masked-LM runs (one of a model named like the paper's RoBERTa-base) and two
    classifier runs of the toy models."""
    root = tmp_path_factory.mktemp("pooled")
    roberta = root / "models" / "roberta-base"
    shutil.copytree(toy_mlm, roberta)
    runs = {}
    for name, model, probe, extra in (
        ("m1", toy_mlm, "mlm", {}),
        ("m2", roberta, "mlm", {"top_k": 5}),
        ("c1", toy_classifier, "sentiment", {}),
        ("c2", toy_classifier, "sentiment", {"seed": 1}),
    ):
        runs[name] = root / name
        get(probe).evaluate(
            str(model), runs[name], prompts=stigma_probe_prompts, progress=False, **extra
        )
    return runs


@pytest.fixture(scope="module")
def pooled_report(pooled_runs: dict, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pooled-report") / "report"
    args = ["report", "stigma", "--runs", *(f"{n}={d}" for n, d in pooled_runs.items())]
    assert main([*args, "--out", str(out)]) == 0
    return out


def test_report_pools_correlates_and_sets_the_papers_beside(pooled_report: Path):
    out = pooled_report
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for name in (
        "mlm_conditions",
        "mlm_groups",
        "sentiment_conditions",
        "sentiment_groups",
        "sentiment_classes",
        "stigma_correlation",
    ):
        assert (out / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert f"figures/{name}.png" in md
    assert html.count("data:image/png;base64,") == 6
    assert "Pooled over 2 run(s)" in md and "Spearman ρ" in md
    rows = json.loads((out / "tables" / "stigma-pooled.json").read_text())
    pearson = next(r for r in rows if r["scope"] == "correlation: pearson")
    assert pearson["n"] == 10 and pearson["r"] > 0.5  # planted in both toys
    # the papers: the run of ".../roberta-base" is matched, the other models are named as missing
    assert "| RoBERTa-base | +0.22 | +" in md and "(`m2`)" in md
    assert "Not compared (no run of the model given): RoBERTa-large, XLNet-large" in md
    assert "r = 0.79" in md


def test_report_of_one_probe_and_bad_mixes(pooled_runs: dict, capsys) -> None:
    assert (
        main(["report", "sentiment", "--runs", str(pooled_runs["c1"]), str(pooled_runs["c2"])]) == 0
    )
    text = capsys.readouterr().out
    assert "Share of each predicted class" in text and "| c1 | pooled | stigmatized |" in text
    assert "Beside Mei et al. 2023: sentiment classifiers" in text
    from scd.eval.benchmarks.stigma.tables import pooled_stigma_table, runs_by_probe

    sds = pooled_runs["m1"].parent / "fake-sds"
    sds.mkdir()
    summary = json.loads((pooled_runs["m1"] / "summary.json").read_text())
    (sds / "summary.json").write_text(json.dumps({**summary, "probe": "sds"}))
    with pytest.raises(InputError, match="one probe's runs, or mlm runs with sentiment runs"):
        pooled_stigma_table(runs_by_probe({"a": sds, "b": pooled_runs["c1"]}))
    assert main(["report", "mlm", "--runs", f"x={pooled_runs['m1']}", str(pooled_runs["m1"])]) == 0
    assert main(["report", "mlm", "--runs", f"m1={pooled_runs['m1']}", str(pooled_runs["m1"])]) == 2
    assert "given twice" in capsys.readouterr().err


def test_aq27_of_a_paper_model_is_set_beside_table_2(
    toy_mlm: Path, tiny_prompts: Path, tmp_path: Path
) -> None:
    model = tmp_path / "mental-roberta-base"
    shutil.copytree(toy_mlm, model)
    run = tmp_path / "aq27"
    get("aq27").evaluate(str(model), run, prompts=tiny_prompts, progress=False, in_vocabulary=False)
    md = get("aq27").table({"mental": run}).markdown
    assert "## Beside Mina et al. 2024: AQ-27" in md and "### MentalRoBERTa (`mental`)" in md
    assert "| Anger | *** | 0.99 |" in md  # the paper's row, then scd's
    assert "Not compared (no run of the model given): roberta-biomedical-clinical-es" in md


@pytest.mark.slow
def test_browser_renders_the_pooled_figures(pooled_report: Path, screenshot) -> None:
    image = screenshot(pooled_report / "report.html", 6000)
    saturation = image.max(axis=2) - image.min(axis=2)
    red = (image[..., 0] > 0.6) & (image[..., 2] < 0.4) & (saturation > 0.3)
    blue = (image[..., 2] > 0.5) & (image[..., 0] < 0.4) & (saturation > 0.3)
    assert red.sum() > 2000 and blue.sum() > 2000  # stigmatized and non-stigmatized bars/points
    coloured_rows = np.flatnonzero((saturation > 0.3).sum(axis=1) > 20)
    assert coloured_rows.size > 600, "figures did not render"
