"""The mlm probe's default lexicon: the authors' annotated words when the data directory holds
them, else the packaged list; which one is said in the summary and tables and pinned for resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.benchmarks.stigma.mlm import (
    AUTHORS_LEXICON,
    DEFAULT_LEXICON,
    MLM,
    MLMOptions,
    choose_lexicon,
    load_lexicon,
)
from scd.eval.engines import engine_spec
from scd.io import sha256_file

SHARED = Path(__file__).resolve().parents[2].parent / "shared/data/stigma/mlm_word_attitudes.csv"
WORDS = "word,attitude\nunlikely,negative\ndifficult,negative\nlikely,positive\nfine,positive\n"


def _data_dir(tmp_path: Path, text: str | None = WORDS) -> Path:
    """A ``$SCD_DATA_DIR``, with ``stigma/mlm_word_attitudes.csv`` unless ``text`` is None."""
    data = tmp_path / "data"
    (data / AUTHORS_LEXICON).parent.mkdir(parents=True)
    if text is not None:
        (data / AUTHORS_LEXICON).write_text(text)
    return data


def _identity(tmp_path: Path) -> dict:
    """What a result of the mlm probe with the default lexicon pins (the prompts: a stand-in)."""
    (tmp_path / "p").mkdir(exist_ok=True)
    (tmp_path / "p" / "sds.parquet").write_bytes(b"stand-in")
    return MLM().identity(MLMOptions(prompts=str(tmp_path / "p")), "m", None, engine_spec())


def test_choice_of_lexicon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCD_DATA_DIR", str(tmp_path / "empty"))
    packaged = choose_lexicon(None)
    assert packaged.source == "packaged" and packaged.pinned == DEFAULT_LEXICON
    assert f"not found under {tmp_path / 'empty' / 'stigma'}" in packaged.note
    assert len(load_lexicon(packaged.path)) == 64
    data = _data_dir(tmp_path)
    monkeypatch.setenv("SCD_DATA_DIR", str(data))
    authors = choose_lexicon(None)
    assert authors.source == "authors" and authors.path == data / AUTHORS_LEXICON
    assert authors.pinned == str(data / AUTHORS_LEXICON)
    given = choose_lexicon(tmp_path / "mine.csv")  # --lexicon wins over the data dir
    assert given.source == "given" and given.pinned == str(tmp_path / "mine.csv")
    pinned = _identity(tmp_path)
    assert pinned["lexicon"] == authors.pinned
    assert pinned["lexicon_sha256"] == sha256_file(data / AUTHORS_LEXICON)


def test_the_authors_file_is_the_default_when_present(tmp_path, monkeypatch) -> None:
    if not SHARED.is_file():
        pytest.skip("reference data absent")
    data = _data_dir(tmp_path, None)
    shutil.copy(SHARED, data / AUTHORS_LEXICON)
    monkeypatch.setenv("SCD_DATA_DIR", str(data))
    assert _identity(tmp_path)["lexicon_sha256"] == sha256_file(SHARED)
    assert len(load_lexicon(choose_lexicon(None).path)) == 443  # 445 rows, 2 case duplicates


def test_run_says_which_lexicon_and_resume_never_mixes(
    toy_mlm: Path, tiny_prompts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data_dir(tmp_path)
    monkeypatch.setenv("SCD_DATA_DIR", str(data))
    out = tmp_path / "authors"
    s = get("mlm").evaluate(str(toy_mlm), out, prompts=tiny_prompts, progress=False)
    rated = s["mean_rated_share"]
    assert s["lexicon_source"] == "authors" and s["lexicon"] == str(data / AUTHORS_LEXICON)
    config = json.loads((out / "run.json").read_text())
    assert config["lexicon"] == str(data / AUTHORS_LEXICON)
    assert config["lexicon_sha256"] == sha256_file(data / AUTHORS_LEXICON)
    assert (
        f"Lexicon: the words annotated by Mei et al. 2023 ({data / AUTHORS_LEXICON})"
        in (out / "tables.md").read_text()
    )
    # the authors' file gone, the same command would score with the packaged list: refused
    (data / AUTHORS_LEXICON).unlink()
    with pytest.raises(InputError, match="another configuration .*lexicon"):
        get("mlm").evaluate(str(toy_mlm), out, prompts=tiny_prompts, progress=False)
    out = tmp_path / "packaged"
    s = get("mlm").evaluate(str(toy_mlm), out, prompts=tiny_prompts, progress=False)
    assert s["lexicon_source"] == "packaged"
    assert s["mean_rated_share"] > rated + 0.1  # the toy's 6 fill words: all rated, not 4
    assert f"were not found under {data / 'stigma'}" in s["lexicon_note"]
    assert json.loads((out / "run.json").read_text())["lexicon"] == DEFAULT_LEXICON
    assert "Lexicon: scd's packaged likely/unlikely list" in (out / "tables.md").read_text()
