"""``--limit``: stratified subsets keep every level in proportion, for any size and seed."""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scd.eval.benchmarks.bbq.data import load_bbq, stratified_subset
from scd.eval.benchmarks.bias.task import STRATA, load_work, stratified_sets
from scd.eval.sampling import stratified_sample


def _set_strata(prompts: Path) -> dict[str, tuple[str, ...]]:
    table = pq.read_table(prompts / "prompts.parquet", columns=[*STRATA, "set_id"]).to_pylist()
    return {r["set_id"]: tuple(r[k] for k in STRATA) for r in table}


@pytest.mark.parametrize("n_prompts", [600, 1500, 4000, 12000])
@pytest.mark.parametrize("seed", [0, 7])
def test_every_level_of_holistic_bias_keeps_its_share(hb_prompts: Path, n_prompts, seed):
    strata = _set_strata(hb_prompts)
    chosen = stratified_sets(pq.read_table(hb_prompts / "prompts.parquet"), n_prompts, seed)
    assert len(chosen) == math.ceil(n_prompts / 3)
    for level, name in enumerate(STRATA):
        have = collections.Counter(strata[s][level] for s in chosen)
        total = collections.Counter(k[level] for k in strata.values())
        for value, size in total.items():
            share = len(chosen) * size / len(strata)
            # within one set of the proportional share (the old allocation put all 600 prompts
            # of --limit 600 in "Common goals" and none in Workplace for two scales)
            assert abs(have[value] - share) <= 1.0, (name, value, have[value], share)


def test_seeds_give_different_subsets_and_the_same_seed_the_same(hb_prompts: Path):
    table = pq.read_table(hb_prompts / "prompts.parquet")
    a, b = stratified_sets(table, 600, 0), stratified_sets(table, 600, 1)
    assert a == stratified_sets(table, 600, 0)
    assert len(a & b) < len(a) / 2


def test_unequal_strata_stay_proportional_and_small_sizes_work():
    keys = [("a", "x")] * 700 + [("a", "y")] * 100 + [("b", "x")] * 150 + [("b", "y")] * 50
    for want in (1, 3, 10, 97, 500, 1000, 5000):
        idx = stratified_sample(keys, want, seed=3)
        assert len(idx) == min(want, len(keys)) == len(set(idx))
        top = collections.Counter(keys[i][0] for i in idx)
        assert abs(top["a"] - min(want, 1000) * 0.8) <= 1
        second = collections.Counter(keys[i][1] for i in idx)
        assert abs(second["x"] - min(want, 1000) * 0.85) <= 1


def test_bbq_subset_is_proportional_per_category_and_context(shared_data: Path):
    rows = load_bbq(shared_data / "bbq" / "data")
    keys = [(r["category"], r["context_condition"], r["question_polarity"]) for r in rows]
    for limit, seed in ((48, 0), (1200, 1), (3000, 2)):
        sub = stratified_subset(rows, limit, seed)
        assert len(sub) == limit
        for level in range(3):
            have = collections.Counter(
                (r["category"], r["context_condition"], r["question_polarity"])[level] for r in sub
            )
            total = collections.Counter(k[level] for k in keys)
            for value, size in total.items():
                assert abs(have[value] - limit * size / len(rows)) <= 1.0
    assert stratified_subset(rows, 300, 0) != stratified_subset(rows, 300, 1)


def test_limited_work_carries_the_baselines_of_its_templates_only(hb_prompts: Path):
    work = load_work(hb_prompts, 60, seed=0)
    descriptor = [w for w in work if not w["baseline"]]
    baseline = [w for w in work if w["baseline"]]
    cells = {(w["principle"], w["scenario"], w["action"], w["scale"]) for w in descriptor}
    assert len(descriptor) == 60 and baseline
    assert {(w["principle"], w["scenario"], w["action"], w["scale"]) for w in baseline} == cells
    assert len(baseline) == 3 * len(cells)  # no, positive and negative contact per template
    full = [w for w in load_work(hb_prompts, None, seed=0) if w["baseline"]]
    assert len(full) == 540  # 6 principles x 5 scenarios x 2 actions x 3 scales x 3 contacts
