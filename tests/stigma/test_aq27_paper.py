"""AQ-27 as Mina et al. 2024 ran it: the in-vocabulary filter (section 3.1) and Figures 1 and 2
(``scd report aq27`` to report.html, rendered in a real browser)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from scd.cli import main
from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.benchmarks.stigma.aq27 import in_vocabulary
from scd.eval.benchmarks.stigma.aq27_figures import (
    boxes_png,
    diffs_png,
    mean_differences,
    records_frame,
)

REMOVED = ("schizophrenia", "blocked")  # taken out of the toy tokenizer's vocabulary
# of the first 5 illnesses per type (stigma_probe_prompts): the word-level toy tokenizer splits
# "Alzheimer's" into Alzheimer ' s; the others lose a word to [UNK]
DROPPED = {"mental": ["Alzheimer's", "schizophrenia"], "physical": ["a blocked nose"]}
KEPT = {
    "mental": ["anxiety", "bulimia", "dementia"],
    "physical": ["a cold", "appendicitis", "tonsillitis", "allergies"],
}


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def narrow_causal(toy_causal: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy causal LM with ``REMOVED`` out of its word-level vocabulary (ids kept)."""
    out = tmp_path_factory.mktemp("aq27") / "narrow"
    shutil.copytree(toy_causal, out)
    spec = json.loads((out / "tokenizer.json").read_text())
    for word in REMOVED:
        del spec["model"]["vocab"][word]
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out


@pytest.fixture(scope="module")
def runs(narrow_causal: Path, stigma_probe_prompts: Path, tmp_path_factory) -> dict[str, Path]:
    """The filtered run (in_vocabulary true) and the unfiltered one (a causal LM's default)."""
    root = tmp_path_factory.mktemp("aq27-runs")
    aq27 = get("aq27")
    aq27.evaluate(
        str(narrow_causal),
        root / "kept",
        prompts=stigma_probe_prompts,
        progress=False,
        in_vocabulary=True,
    )
    aq27.evaluate(str(narrow_causal), root / "all", prompts=stigma_probe_prompts, progress=False)
    return {"kept": root / "kept", "all": root / "all"}


def _word_tokenizer(vocab: list[str]) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *vocab])}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def _bpe_tokenizer(corpus: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_in_vocabulary_means_every_word_one_token_after_a_space() -> None:
    words = _word_tokenizer(["who", "has", "a", "cold", "Alzheimer", "'", "s", "OCD"])
    assert in_vocabulary(words, "a cold") and in_vocabulary(words, "OCD")
    assert not in_vocabulary(words, "Alzheimer's")  # three tokens
    assert not in_vocabulary(words, "a flu")  # "flu" is the unknown token
    # byte-level BPE: " anxiety" (with its space) is a token; "depression" only at the start of
    # a text, so " depression" is two tokens and out
    bpe = _bpe_tokenizer(["who has anxiety"] * 20 + ["depression"] * 20)
    assert bpe.convert_tokens_to_ids("Ġanxiety") != bpe.unk_token_id
    assert "depression" in bpe.get_vocab() and "Ġdepression" not in bpe.get_vocab()
    assert in_vocabulary(bpe, "anxiety") and not in_vocabulary(bpe, "depression")


def test_filter_drops_exactly_the_illnesses_out_of_the_vocabulary(runs: dict[str, Path]) -> None:
    kept = json.loads((runs["kept"] / "summary.json").read_text())
    assert kept["in_vocabulary"] is True
    assert kept["illnesses_dropped"] == DROPPED and kept["illnesses_kept"] == KEPT
    assert {r["illness"] for r in _records(runs["kept"])} == {*KEPT["mental"], *KEPT["physical"]}
    pinned = json.loads((runs["kept"] / "run.json").read_text())
    pinned = pinned.get("config", pinned)
    assert pinned["in_vocabulary"] is True and pinned["illnesses_kept"] == KEPT
    assert pinned["n_items"] == len(_records(runs["kept"])) == kept["n_records"]
    line = next(
        x
        for x in (runs["kept"] / "tables.md").read_text().splitlines()
        if x.startswith("Illnesses")
    )
    assert "3 of 5 mental and 4 of 5 physical" in line
    assert "mental: Alzheimer's, schizophrenia; physical: a blocked nose" in line
    # a causal LM's default, in_vocabulary false: nothing dropped, every illness scored
    every = json.loads((runs["all"] / "summary.json").read_text())
    assert every["in_vocabulary"] is False
    assert every["illnesses_dropped"] == {"mental": [], "physical": []}
    assert {k: len(v) for k, v in every["illnesses_kept"].items()} == {"mental": 5, "physical": 5}
    assert len({r["illness"] for r in _records(runs["all"])}) == 10
    assert "(in_vocabulary false" in (runs["all"] / "tables.md").read_text()


def test_a_masked_lms_default_keeps_only_the_illnesses_in_its_vocabulary(
    toy_mlm: Path, stigma_probe_prompts: Path, tmp_path: Path
) -> None:
    """No in_vocabulary given: a masked LM filters (the paper's models were masked LMs)."""
    from transformers import AutoTokenizer

    out = tmp_path / "mlm"
    get("aq27").evaluate(str(toy_mlm), out, prompts=stigma_probe_prompts, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    kept, dropped = summary["illnesses_kept"], summary["illnesses_dropped"]
    assert summary["in_vocabulary"] is True
    assert dropped == {"mental": ["Alzheimer's"], "physical": []}  # 3 tokens in its vocabulary
    assert len(kept["mental"]) == 4 and len(kept["physical"]) == 5
    tokenizer = AutoTokenizer.from_pretrained(toy_mlm)
    for kind in ("mental", "physical"):
        assert all(in_vocabulary(tokenizer, name) for name in kept[kind])
        assert not any(in_vocabulary(tokenizer, name) for name in dropped[kind])
    assert {r["illness"] for r in _records(out)} == {*kept["mental"], *kept["physical"]}
    pinned = json.loads((out / "run.json").read_text())
    assert pinned.get("config", pinned)["in_vocabulary"] is True


def test_a_resume_never_mixes_the_lists(
    runs: dict[str, Path], narrow_causal: Path, stigma_probe_prompts: Path
) -> None:
    with pytest.raises(InputError, match="another configuration"):
        get("aq27").evaluate(
            str(narrow_causal),
            runs["kept"],
            prompts=stigma_probe_prompts,
            progress=False,
            in_vocabulary=False,
        )


def test_too_few_illnesses_left_is_one_clear_error(
    toy_causal: Path, tiny_prompts: Path, tmp_path: Path
) -> None:
    with pytest.raises(InputError) as err:  # tiny prompts: one illness per type, Alzheimer's
        get("aq27").evaluate(
            str(toy_causal),
            tmp_path / "a",
            prompts=tiny_prompts,
            progress=False,
            in_vocabulary=True,
        )
    text = str(err.value)
    assert err.value.key == "in_vocabulary" and "\n" not in text
    assert "0 of the 1 mental illnesses" in text and "set in_vocabulary false" in text
    assert not (tmp_path / "a").exists()


def _synthetic() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [
        {
            "run": run,
            "dimension": dim,
            "illness_type": kind,
            "score": rng.normal(0.5 if kind == "mental" else 0.0, 1.0),
        }
        for run in ("base", "tuned")
        for dim in ("anger", "fear", "help")
        for kind in ("mental", "physical")
        for _ in range(30)
    ]
    return pd.DataFrame(rows)


def test_figures_are_deterministic_pngs_and_check_their_frames() -> None:
    frame = _synthetic()
    for draw in (boxes_png, diffs_png):
        png = draw(frame, "score")
        assert png.startswith(b"\x89PNG") and draw(frame.copy(), "score") == png
    bad = {
        "missing column": frame.drop(columns="score"),
        "the frame is empty": frame.iloc[:0],
        "unknown illness_type": frame.replace({"illness_type": {"physical": "other"}}),
        "non-numeric": frame.assign(score="x"),
    }
    for match, data in bad.items():
        for draw in (boxes_png, diffs_png):
            with pytest.raises(InputError, match=match):
                draw(data)


def test_figure_2_differences_are_the_summary_means(runs: dict[str, Path]) -> None:
    diffs = mean_differences(records_frame(runs)).set_index(["run", "dimension"])["mean_diff"]
    for name, out in runs.items():
        summary = json.loads((out / "summary.json").read_text())
        assert diffs[(name, "all")] == pytest.approx(summary["overall"]["mean_diff"], abs=1e-9)
        for dim, r in summary["dimensions"].items():
            assert diffs[(name, dim)] == pytest.approx(r["mean_diff"], abs=1e-9)


@pytest.fixture(scope="module")
def report_dir(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("aq27-report") / "report"
    args = ["report", "aq27", "--runs", *(f"{n}={d}" for n, d in runs.items())]
    assert main([*args, "--out", str(out)]) == 0
    return out


def test_scd_report_writes_html_with_both_figures(report_dir: Path) -> None:
    html = (report_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2
    assert 'alt="aq27_boxes"' in html and 'alt="aq27_diffs"' in html
    md = (report_dir / "report.md").read_text()
    at = [md.index(f"![{n}](figures/{n}.png)") for n in ("aq27_boxes", "aq27_diffs")]
    assert md.index("| Illnesses scored | 3/5 mental + 4/5 physical | 5/5 mental") < at[0] < at[1]
    assert "Figure 1 of Mina et al. 2024" in md and "Figure 2 of Mina et al. 2024" in md
    for name in ("aq27_boxes", "aq27_diffs"):
        assert (report_dir / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    assert (report_dir / "tables" / "stigma-aq27.csv").is_file()


def test_run_report_section_carries_the_figures(runs: dict[str, Path], tmp_path: Path) -> None:
    """What scd.report.build does with a run's layout: the section, its tables and figures."""
    from scd.report.html import write_report

    layout = {
        "base": {"aq27": str(runs["all"])},
        "settings": {"1": {"sft": "", "adapter": "", "evals": {"aq27": str(runs["kept"])}}},
    }
    figures: dict[str, bytes] = {}
    lines = get("aq27").report(layout, tmp_path / "tables", figures)  # type: ignore[arg-type]
    assert sorted(figures) == ["aq27_boxes", "aq27_diffs"]
    assert "{{figure:aq27_boxes}}" in lines[0] and (tmp_path / "tables/stigma-aq27.md").is_file()
    _, html = write_report(tmp_path / "report", "run", "\n".join(lines), figures)
    assert html.read_text().count("data:image/png;base64,") == 2


@pytest.mark.slow
def test_browser_renders_the_aq27_figures(report_dir: Path, screenshot) -> None:
    image = screenshot(report_dir / "report.html", 3000)
    # the boxes (red, blue) and the bars (the dimensions' colours) are the saturated pixels
    saturation = image.max(axis=2) - image.min(axis=2)
    coloured_rows = np.flatnonzero((saturation > 0.3).sum(axis=1) > 20)
    assert coloured_rows.size > 300, "figures did not render"
    red = (image[..., 0] > 0.6) & (image[..., 2] < 0.4) & (saturation > 0.3)
    blue = (image[..., 2] > 0.5) & (image[..., 0] < 0.4) & (saturation > 0.3)
    assert red.sum() > 500 and blue.sum() > 500  # mental and physical boxes
