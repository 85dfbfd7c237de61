"""Every ``scd generate`` output is a Hub-ready dataset: its card's front matter names the Parquet
files, ``datasets.load_dataset(DIR)`` reads it offline, and ``--push-to-hub`` never shows the
token."""

from __future__ import annotations

import contextlib
import io

import pyarrow.parquet as pq
import pytest
import yaml

from scd.cli import main
from scd.data_gen.card import _license


def _front(directory) -> dict:
    text = (directory / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_the_cards_name_every_file_and_load_with_datasets(tmp_path):
    from datasets import load_dataset

    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import resolve_descriptors
    from scd.data_gen.sft import write_sft
    from scd.data_gen.stigma_probes import generate_stigma

    toy_prompts = tmp_path / "contact"
    write_prompts(toy_prompts, resolve_descriptors("toy"))
    generate_stigma(tmp_path / "stigma", limit_conditions=2)
    write_sft(toy_prompts, 1, tmp_path / "sft", max_train=50, max_eval=20)
    expect = {
        toy_prompts: {
            "prompts": {"test": "prompts.parquet"},
            "baseline": {"test": "baseline.parquet"},
        },
        tmp_path / "stigma": {n: {"test": f"{n}.parquet"} for n in ("sds", "sentiment", "aq27")},
        tmp_path / "sft": {
            "sft": {"train": "train.parquet", "validation": "eval.parquet"},
            "heldout": {"test": "heldout/prompts.parquet"},
            "heldout_baseline": {"test": "heldout/baseline.parquet"},
        },
    }
    for directory, configs in expect.items():
        front = _front(directory)
        got = {
            c["config_name"]: {f["split"]: f["path"] for f in c["data_files"]}
            for c in front["configs"]
        }
        assert got == configs and front["configs"][0]["default"] is True
        assert front["license"] == ("other" if directory.name == "stigma" else "mit")
        card = (directory / "README.md").read_text()
        for config, splits in configs.items():
            for split, file in splits.items():
                rows = pq.read_metadata(directory / file).num_rows
                assert f"| {config} | {split} | `{file}` | {rows:,} |" in card
                data = load_dataset(str(directory), config)[split]
                assert (
                    data.num_rows == rows
                    and data.column_names == pq.read_schema(directory / file).names
                )
    first = load_dataset(str(toy_prompts))["test"][0]  # the default config, no name needed
    assert first["prompt"] and first["options"] in (
        ["Yes", "No"],
        ["Likely", "Unlikely"],
        ["Mostly", "Rarely"],
    )


def test_the_license_follows_the_descriptors():
    assert _license([{"kind": "holistic_bias"}], None)[0] == "cc-by-sa-4.0"
    assert _license([{"kind": "holistic_bias"}, {"kind": "toy"}], None)[0] == "cc-by-sa-4.0"
    both = _license([{"kind": "holistic_bias"}, {"kind": "stigma"}], None)  # setting 2
    assert both[0] == "other" and "HolisticBias" in both[1] and "Mei et al." in both[1]
    assert _license([{"kind": "holistic_bias_format"}], None)[0] == "other"
    assert _license([{}], None)[0] == "other"  # a source scd does not know
    assert _license([{"kind": "toy"}], "yahma/alpaca-cleaned")[0] == "other"


def _cli(argv, monkeypatch, **env) -> tuple[int, str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


def test_push_to_hub_checks_the_token_first_and_never_shows_it(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored login either
    argv = ["generate", "contact", "--descriptors", "toy", "--push-to-hub", "someone/scd-toy"]
    code, text = _cli([*argv, "--out", str(tmp_path / "a")], monkeypatch)
    assert code == 2 and "no Hub token: set HF_TOKEN" in text
    assert not (tmp_path / "a").exists()  # refused before any work
    secret = "hf_plantedTOKENnotForAnyLog123"
    code, text = _cli(
        [*argv, "--out", str(tmp_path / "b")],
        monkeypatch,
        HF_TOKEN=secret,
        HF_ENDPOINT="http://127.0.0.1:9",
    )  # nothing listens there
    assert code == 2 and "cannot upload to the Hub" in text and secret not in text
    assert (tmp_path / "b" / "README.md").is_file()  # the dataset itself is complete
    assert secret not in "".join(
        p.read_text() for p in (tmp_path / "b").glob("*.*") if p.suffix in (".md", ".json")
    )


def test_every_generate_command_can_push():
    from scd.cli import build_parser

    parser = build_parser()
    for what in ("contact", "stigma", "sft"):
        with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit):
            parser.parse_args(["generate", what, "--help"])
        assert "--push-to-hub REPO" in out.getvalue()
