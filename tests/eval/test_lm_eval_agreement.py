"""CrowS-Pairs and Winogender as lm-evaluation-harness 0.4.13 defines them: its own task files
(``crows_pairs_english``, ``winogender_all``: their YAML and ``utils.py``, pointed at the same
items from the reference data instead of the Hub) run by lm-eval itself on the same tiny model
(Llama 2's real tokenizer, random weights) give scd's per-item choices, log-likelihoods and
aggregates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scd.eval.benchmarks import get
from scd.eval.benchmarks.crows_pairs import load_pairs
from scd.eval.benchmarks.winogender import load_sentences
from scd.export.lm_eval_subset import lm_eval_task_on

pytestmark = pytest.mark.slow


def _lm_eval(model: Path, task_dir: Path, task: str) -> tuple[dict, list[dict]]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    res = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model},dtype=float32",
        tasks=[task],
        device="cpu",
        batch_size=16,
        task_manager=TaskManager(include_path=str(task_dir)),
        log_samples=True,
    )
    return res["results"][task], sorted(res["samples"][task], key=lambda s: s["doc_id"])


@pytest.fixture(scope="module")
def tiny_llama2(tiny_model_builder, real_tokenizers: Path, tmp_path_factory) -> Path:
    pytest.importorskip("lm_eval")
    return tiny_model_builder(real_tokenizers / "llama-2-chat", tmp_path_factory.mktemp("tiny"))


def test_crows_pairs_equals_lm_evals_crows_pairs_english(tiny_llama2, shared_data, tmp_path):
    pairs = load_pairs(str(shared_data / "crows_pairs"))[:150]
    subset = tmp_path / "crows"
    subset.mkdir()
    head = (shared_data / "crows_pairs" / "crows_pairs_anonymized.csv").read_text().splitlines()
    (subset / "crows_pairs_anonymized.csv").write_text("\n".join(head[:151]) + "\n")
    assert [p["id"] for p in load_pairs(str(subset))] == [p["id"] for p in pairs]
    docs = [{"sent_more": p["sent_more"], "sent_less": p["sent_less"]} for p in pairs]
    task = lm_eval_task_on(
        tmp_path / "task", "crows_pairs/crows_pairs_english.yaml", "cp_check", docs
    )
    theirs, samples = _lm_eval(tiny_llama2, task, "cp_check")
    ours = get("crows_pairs").evaluate(str(tiny_llama2), tmp_path / "scd", data=str(subset))
    records = [json.loads(x) for x in (tmp_path / "scd" / "records.jsonl").open()]
    assert len(samples) == len(records) == 150
    for sample, rec in zip(samples, records):
        (more, _), (less, _) = sample["filtered_resps"]
        assert rec["ll_more"] == pytest.approx(more, abs=1e-4)
        assert rec["ll_less"] == pytest.approx(less, abs=1e-4)
        assert float(rec["stereotypical"]) == sample["pct_stereotype"]
    assert ours["overall"]["pct"] / 100 == pytest.approx(theirs["pct_stereotype,none"])
    assert ours["overall"]["likelihood_diff"] == pytest.approx(
        theirs["likelihood_diff,none"], abs=1e-4
    )


def test_winogender_equals_lm_evals_winogender_all(tiny_llama2, shared_data, tmp_path):
    data = shared_data / "winogender"
    rows = load_sentences(str(data))
    fields = ("sentence", "pronoun", "occupation", "participant", "label", "gender")
    docs = [{k: r[k] for k in fields} for r in rows]
    task = lm_eval_task_on(tmp_path / "task", "winogender/winogender.yaml", "wg_check", docs)
    theirs, samples = _lm_eval(tiny_llama2, task, "wg_check")
    ours = get("winogender").evaluate(str(tiny_llama2), tmp_path / "scd", data=str(data))
    records = [json.loads(x) for x in (tmp_path / "scd" / "records.jsonl").open()]
    assert len(samples) == len(records) == 720
    for sample, rec in zip(samples, records):
        lls = [x[0] for x in sample["filtered_resps"]]
        assert rec["logprobs"] == pytest.approx(lls, abs=1e-4)
        assert float(rec["correct"]) == sample["acc"]
    assert ours["overall"]["pct"] / 100 == pytest.approx(theirs["acc,none"])


def test_bbq_in_lm_evals_format_equals_lm_evals_bbq(tiny_llama2, shared_data, tmp_path):
    """``scd eval bbq --format lm-eval --no-chat-template``: lm-eval's twelve choices scored as
    lm-eval scores them -- the same pick per item and the same acc, accuracy_amb,
    accuracy_disamb and bias scores (its own aggregation code) on a stratified subset."""
    from scd.eval.benchmarks.bbq.data import FIELDS, load_bbq, stratified_subset

    items = stratified_subset(
        load_bbq(str(shared_data / "bbq" / "data"), ["Age", "Religion"]), 80, 0
    )
    docs = [{k: it[k] for k in FIELDS} for it in items]
    task = lm_eval_task_on(tmp_path / "task", "bbq/bbq_multiple_choice.yaml", "bbq_check", docs)
    theirs, samples = _lm_eval(tiny_llama2, task, "bbq_check")
    ours = get("bbq").evaluate(
        str(tiny_llama2),
        tmp_path / "scd",
        data=str(shared_data / "bbq" / "data"),
        categories=["Age", "Religion"],
        limit=80,
        seed=0,
        format="lm-eval",
        chat_template=False,
    )
    records = [json.loads(x) for x in (tmp_path / "scd" / "records.jsonl").open()]
    assert [r["id"] for r in records] == [it["id"] for it in items]
    assert len(samples) == len(records) > 60
    for sample, rec in zip(samples, records):
        lls = [x[0] for x in sample["filtered_resps"]]
        assert rec["lm_eval"]["logprobs"] == pytest.approx(lls, abs=1e-4)
        assert rec["lm_eval"]["pick"] == max(range(len(lls)), key=lambda i: lls[i])
        assert rec["lm_eval"]["acc"] == sample["acc"]
    for key, value in ours["lm_eval"].items():
        assert value == pytest.approx(theirs[f"{key},none"], abs=1e-9), key
