"""`train.push_to_hub` with `scd train`: the repository and the token are checked before any
work; the adapter is uploaded with a model card naming the base model and the recipe, and the
token is never shown (a planted token; the Hub unreachable)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from scd.cli import main

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"


def _train(tmp_path: Path, *keys: str, model: str = "toy") -> tuple[int, str]:
    argv = [
        "train",
        str(QUICKSTART),
        "--no-wandb",
        "--set",
        f"model={model}",
        "--set",
        f"output_dir={tmp_path / 'adapter'}",
        "--set",
        "train.max_steps=2",
    ]
    argv += [a for key in keys for a in ("--set", key)]
    out = io.StringIO()
    with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def test_no_repository_or_no_token_is_one_line_before_any_work(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored login either
    code, text = _train(tmp_path, "train.push_to_hub=true")
    assert code == 2 and "train.hub_model_id: train.push_to_hub needs the Hub repository" in text
    code, text = _train(tmp_path, "train.push_to_hub=true", "train.hub_model_id=scd-adapter")
    assert code == 2 and "is not a Hub repository id (owner/name)" in text
    code, text = _train(tmp_path, "train.push_to_hub=true", "train.hub_model_id=me/scd-adapter")
    assert code == 2 and "no Hub token: set HF_TOKEN" in text and len(text.splitlines()) == 1
    assert not (tmp_path / "adapter").exists()  # refused before any work


@pytest.mark.slow
def test_trained_adapter_gets_its_card_and_the_token_never_shows(
    toy_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hf_plantedTOKENnotForAnyLog789"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    keys = ("train.push_to_hub=true", "train.hub_model_id=me/scd-adapter")
    code, text = _train(tmp_path, *keys, model=str(toy_model))
    assert code == 2 and "cannot upload to the Hub" in text and "me/scd-adapter" in text
    assert secret not in text
    adapter = tmp_path / "adapter"
    assert (adapter / "train_manifest.json").is_file()  # trained; only the upload failed
    card = (adapter / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: peft" in card and "- scd" in card
    assert "# me/scd-adapter" in card and f"A LoRA adapter of `{toy_model}`" in card
    assert "base_model:" not in card  # a local path is no Hub id
    assert "2 steps" in card and "Not measured yet: `scd run` evaluates" in card
    assert "```yaml\nmodel: " in card and "push_to_hub: true" in card  # the recipe
    assert secret not in "".join(
        p.read_text(errors="ignore")
        for p in adapter.glob("*.*")
        if p.suffix in (".md", ".json", ".yaml")
    )
    assert not (adapter / "hub.json").exists()
