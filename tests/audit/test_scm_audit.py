"""The SCM audit: the model recovers planted warmth and competence, corpus sentences are matched
and placed, statistics agree with scipy, and bad input is one line with nothing written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from scd.audit.corpus import TermMatcher, load_terms, read_corpus, split_sentences
from scd.audit.scm import SCMModel, accuracy, cross_validate, load_seeds
from scd.audit.summary import bias_map, summarize_scores
from scd.cli import main


def _encode(encoder: Path, texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(encoder), device="cpu").encode(texts, normalize_embeddings=True)


def test_the_model_recovers_planted_warmth_and_competence(scm_seeds, planted_encoder) -> None:
    seeds = load_seeds([scm_seeds])
    assert len(seeds) == 443 and seeds[0].text.startswith("these people are always")
    result = cross_validate(seeds, lambda texts: _encode(planted_encoder, texts))
    assert result["basic"]["mean"] >= 0.95, result  # held-out adjectives, planted signal
    assert sum(f["n_basic"] for f in result["folds"]) == sum(len(s.words) == 1 for s in seeds)
    vectors = _encode(planted_encoder, [s.text for s in seeds])
    model = SCMModel.fit(vectors, [s.label for s in seeds])
    tests = [
        "these people are always friendly",
        "these people are always hostile",
        "these people are always skilled",
        "these people are always clumsy",
    ]
    warmth, competence = model.score(_encode(planted_encoder, tests)).T
    assert warmth[0] > 0 > warmth[1] and competence[2] > 0 > competence[3]
    assert accuracy(model.score(vectors), [s.label for s in seeds]) > 0.95


def test_a_saved_model_scores_the_same(scm_seeds, planted_encoder, tmp_path) -> None:
    seeds = load_seeds([scm_seeds])
    vectors = _encode(planted_encoder, [s.text for s in seeds])
    model = SCMModel.fit(vectors, [s.label for s in seeds])
    model.save(tmp_path / "m", {"encoder": "planted"})
    again = SCMModel.load(tmp_path / "m")
    assert np.array_equal(model.score(vectors), again.score(vectors))
    assert json.loads((tmp_path / "m/manifest.json").read_text())["kind"] == "scd_scm_model"


@pytest.mark.parametrize(
    ("sentence", "found"),
    [
        ("She has cancerous cells.", {}),  # "cancer" is a whole word only
        ("She has cancer.", {"physical": ["cancer"]}),
        ("my adhd is bad", {"mental": ["ADHD"]}),
        ("ADHD-like symptoms", {"mental": ["ADHD"]}),
        ("a  Panic\\tdisorder", {"mental": ["panic disorder"]}),
        ("Alzheimer disease and Alzheimer's", {"mental": ["Alzheimer's"]}),
        ("cold people", {}),  # the illness is "a cold"
        ("I caught a cold", {"physical": ["a cold"]}),
        ("depression and asthma", {"mental": ["depression"], "physical": ["asthma"]}),
    ],
)
def test_terms_match_whole_words_case_insensitively(sentence, found) -> None:
    terms = load_terms()
    terms["physical"].append("cancer")
    assert TermMatcher(terms).find(sentence.replace("\\t", "\t")) == found


def test_sentences_are_split_after_end_punctuation() -> None:
    assert split_sentences('He said "no." Then left!  Why? Fine') == [
        'He said "no."',
        "Then left!",
        "Why?",
        "Fine",
    ]


def test_statistics_agree_with_scipy() -> None:
    from scipy import stats

    rng = np.random.default_rng(1)
    mental, physical = rng.normal(-0.2, 1, (40, 2)), rng.normal(0.3, 1, (25, 2))
    summary = summarize_scores({"mental": mental, "physical": physical})
    w = summary["types"]["mental"]["warmth"]
    low, high = stats.t.interval(0.95, 39, loc=mental[:, 0].mean(), scale=stats.sem(mental[:, 0]))
    assert w["mean"] == pytest.approx(mental[:, 0].mean()) and (w["ci_low"], w["ci_high"]) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    test = stats.mannwhitneyu(mental[:, 1], physical[:, 1], alternative="two-sided")
    got = summary["mental_vs_physical"]["competence"]
    assert got["p"] == pytest.approx(test.pvalue) and got["u"] == pytest.approx(test.statistic)
    q = summary["types"]["physical"]["quadrants"]
    assert q["LW/LC"] == pytest.approx(np.mean((physical[:, 0] < 0) & (physical[:, 1] < 0)))
    assert sum(q.values()) == pytest.approx(1)
    assert set(bias_map()) == {
        "anger",
        "avoidance",
        "blame",
        "coercion",
        "dangerousness",
        "fear",
        "help",
        "pity",
        "segregation",
    }


def test_scd_audit_scm_places_the_corpus(scm_seeds, planted_encoder, corpus_file, tmp_path):
    aq27 = tmp_path / "aq27"
    aq27.mkdir()
    (aq27 / "summary.json").write_text(
        json.dumps(
            {"probe": "aq27", "dimensions": {"anger": {"mean_diff": 0.42, "p_bonferroni": 0.001}}}
        )
    )
    out, cache = tmp_path / "audit", tmp_path / "cache"
    argv = [
        "audit",
        "scm",
        "--corpus",
        str(corpus_file),
        "--seeds",
        str(scm_seeds),
        "--encoder",
        str(planted_encoder),
        "--out",
        str(out),
        "--cache",
        str(cache),
        "--aq27-run",
        str(aq27),
        "--cross-validate",
        "--no-progress",
    ]
    assert main(argv) == 0
    rows = {r["sentence"]: r for r in pq.read_table(out / "sentences.parquet").to_pylist()}
    assert "The weather was cold today." not in rows and len(rows) == 6
    hostile = rows["People with depression are always hostile."]
    assert hostile["mental_terms"] == ["depression"] and hostile["warmth"] < 0
    assert rows["My neighbour has diabetes and is always friendly."]["warmth"] > 0
    assert rows["His asthma never stopped him being skilled."]["competence"] > 0
    summary = json.loads((out / "summary.json").read_text())
    n_lines = len(corpus_file.read_text().splitlines())
    assert summary["n_documents"] == n_lines and summary["n_matched"] == 6
    assert summary["types"]["mental"]["n"] == 3 and summary["types"]["physical"]["n"] == 3
    assert summary["scm_model"]["cross_validation"]["basic"]["mean"] >= 0.95
    anger = next(r for r in summary["bias_map"] if r["dimension"] == "anger")
    low_warmth = [r["warmth"] < 0 for r in rows.values() if r["mental_terms"]]
    assert anger["aq27_mean_diff"] == 0.42 and anger["mental_share"] == np.mean(low_warmth)
    assert anger["mental_share"] >= 2 / 3  # the two hostile sentences
    assert (out / "scm_density.png").read_bytes()[:4] == b"\x89PNG"
    assert "| anger | low | any/low |" in (out / "tables.md").read_text()
    assert len(list((cache / "scm-model").iterdir())) == 1  # trained once, then read back
    assert main([*argv[:-6], "--out", str(tmp_path / "again"), "--no-progress"]) == 0
    assert len(list((cache / "scm-model").iterdir())) == 1


@pytest.mark.parametrize(
    "case", ["no_text_column", "empty", "unknown_encoder", "no_target", "no_illness"]
)
def test_bad_input_is_one_line_and_writes_nothing(
    case, scm_seeds, planted_encoder, tmp_path, capsys
) -> None:
    corpus, seeds, encoder = tmp_path / "c.jsonl", str(scm_seeds), str(planted_encoder)
    corpus.write_text(json.dumps({"text": "People with depression are always hostile."}) + "\n")
    needle = {
        "no_text_column": "no column 'body'",
        "empty": "no text in the corpus",
        "unknown_encoder": "--encoder",
        "no_target": "no <target>",
        "no_illness": "mentions an illness term",
    }[case]
    column = "body" if case == "no_text_column" else "text"
    if case == "empty":
        corpus.write_text("\n")
    elif case == "unknown_encoder":
        encoder = str(tmp_path / "missing-encoder")
    elif case == "no_target":
        bad = tmp_path / "seeds.csv"
        bad.write_text("Sentence,Target\nthese people are always kind,warm\n")
        seeds = str(bad)
    elif case == "no_illness":
        corpus.write_text(json.dumps({"text": "A sunny day."}) + "\n")
    out = tmp_path / "out"
    code = main(
        [
            "audit",
            "scm",
            "--corpus",
            str(corpus),
            "--seeds",
            seeds,
            "--encoder",
            encoder,
            "--text-column",
            column,
            "--out",
            str(out),
            "--cache",
            str(tmp_path / "cache"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err, err
    assert not out.exists()


def test_without_the_audit_extra_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    (tmp_path / "c.txt").write_text("depression\n")
    code = main(
        [
            "audit",
            "scm",
            "--corpus",
            str(tmp_path / "c.txt"),
            "--seeds",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'scd[audit]'" in err and err.count("\n") == 1, err


def test_corpora_in_each_format(tmp_path) -> None:
    import pyarrow as pa

    (tmp_path / "a.txt").write_text("one\n\ntwo\n")
    pq.write_table(pa.table({"body": ["x", "y"]}), tmp_path / "b.parquet")
    assert read_corpus(str(tmp_path / "a.txt")) == ["one", "two"]
    assert read_corpus(str(tmp_path / "b.parquet"), "body") == ["x", "y"]
