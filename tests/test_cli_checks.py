"""What the command line checks and says (#76): `scd train` prints a token rate only where
tokens were counted."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from scd.cli import main

REPO = Path(__file__).resolve().parents[1]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


# -- scd train's last line -----------------------------------------------------------------------
@pytest.mark.parametrize(("rate", "shown"), [(None, ""), (1234.5, ", 1234.5 tokens/s")])
def test_train_prints_a_token_rate_only_where_one_was_counted(rate, shown, monkeypatch, tmp_path):
    info = {"global_step": 3, "train_loss": 0.5, "tokens_per_second": rate}  # None: DPO, KTO
    monkeypatch.setattr("scd.train.trainer.train", lambda recipe, **kwargs: info)
    monkeypatch.setattr("scd.models.toy.ensure_toy_model", lambda *a, **k: tmp_path / "toy")
    recipe = REPO / "recipes" / "quickstart.yaml"
    code, out, err = _run(["train", str(recipe), "--outputs", str(tmp_path), "--no-wandb"])
    assert code == 0, err
    adapter = tmp_path / "train" / "quickstart"
    assert out.splitlines()[-1] == f"trained 3 steps, loss 0.5000{shown} -> {adapter}"
