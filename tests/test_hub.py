"""Hub ids known to be there (or not) before any work: the local Hub cache, then one question to
the Hub; a local-looking path that is missing is never sent to the Hub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import RepositoryNotFoundError

from scd.data_gen.general import load_general
from scd.errors import InputError
from scd.eval.benchmarks.bbq.data import load_bbq
from scd.hub import hub_problem
from scd.models import resolve_model

REPO = Path(__file__).resolve().parents[1]


def _cached_model(cache: Path, repo: str) -> None:
    """``repo`` as huggingface_hub lays a download out in its cache."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    snapshot = folder / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")


def test_a_hub_id_in_the_local_cache_resolves_offline_and_one_that_is_not_fails_in_a_line(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert constants.HF_HUB_OFFLINE  # the test suite runs offline
    _cached_model(tmp_path, "org/cached")
    assert resolve_model("org/cached") == "org/cached"
    with pytest.raises(InputError) as err:
        resolve_model("org/not-cached", key="model")
    assert str(err.value) == (
        "model org/not-cached: not in the local Hub cache, and HF_HUB_OFFLINE is set (download it "
        "once online, or give a local path)"
    )


def test_online_the_hub_is_asked_once_and_its_answer_is_one_line(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)  # the tests' conftest sets it
    asked: list[str] = []

    def unreachable(self, repo_id, **kwargs):
        asked.append(repo_id)
        raise httpx.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "repo_info", unreachable)
    assert "the Hub cannot be reached ([Errno -2] Name or service not known)" in hub_problem("o/n")
    assert asked == ["o/n"]  # once, no retries

    def missing(self, repo_id, **kwargs):
        response = httpx.Response(404, request=httpx.Request("GET", "https://huggingface.co"))
        raise RepositoryNotFoundError("404", response=response)

    monkeypatch.setattr(HfApi, "repo_info", missing)
    assert hub_problem("o/typo") == "no such model on the Hub (a private one needs HF_TOKEN)"
    assert hub_problem("o/typo", repo_type="dataset", filename=None).startswith("no such dataset")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # datasets' own switch: its cache answers
    assert hub_problem("o/typo", repo_type="dataset", filename=None) == ""
    assert hub_problem("o/typo").startswith("no such model")  # a model still asks
    monkeypatch.setattr(HfApi, "repo_info", lambda self, repo_id, **kw: None)  # listed
    assert hub_problem("o/listed") == ""


def test_the_shipped_smollm2_recipe_offline_fails_in_one_line_before_anything_is_written(
    tmp_path: Path,
):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    out = tmp_path / "outputs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scd",
            "run",
            "recipes/smollm2-135m-instruct/validate.yaml",
            "--outputs",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "scd: error: model HuggingFaceTB/SmolLM2-135M-Instruct: not in the local Hub cache, and "
        "HF_HUB_OFFLINE is set (download it once online, or give a local path)"
    ]  # one line: no warning of the recipe's own, no retries
    assert not out.exists()


def test_missing_local_looking_data_is_no_such_path_never_a_hub_dataset(
    tmp_path: Path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "repo_info", lambda *a, **k: pytest.fail("asked the Hub"))
    with pytest.raises(InputError, match=r"^--data data/bbq: no such directory or file$"):
        load_bbq("data/bbq")
    with pytest.raises(InputError, match=r"^--general data/alpaca.json: no such file$"):
        load_general("data/alpaca.json", 4, 0)
