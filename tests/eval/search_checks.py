"""What the tests of the steer and erase arms' searches check of the prompts a search read."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def assert_no_heldout_prompt(ids: list[str], sft: Path) -> None:
    """None of ``ids`` (what a search read) is a held-out prompt or baseline of ``sft``, by id
    or by text."""
    from scd.eval.search_points import validation_rows

    held = pd.concat(
        [pd.read_parquet(sft / "heldout" / f) for f in ("prompts.parquet", "baseline.parquet")]
    )
    read = pd.read_parquet(sft / "validation" / "prompts.parquet").set_index("prompt_id").loc[ids]
    assert len(ids) > 0 and not set(ids) & set(held["prompt_id"])
    assert not set(read["prompt"]) & set(held["prompt"])
    assert not set(read["set_id"]) & set(held["set_id"])
    assert [r["prompt_id"] for r in validation_rows(sft, 60, 42)] == ids  # train.eval_prompts, seed
