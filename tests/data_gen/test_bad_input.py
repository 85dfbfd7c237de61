"""Bad input: one line naming the file/key, exit code 2, no traceback, nothing half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scd.cli import main
from scd.data_gen.descriptors import resolve_descriptors
from scd.errors import InputError


def _fails(capsys: pytest.CaptureFixture, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def test_malformed_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "descriptors.json"
    bad.write_text('{"ability": {"x": ["Deaf",]}')
    out = tmp_path / "out"
    _fails(
        capsys,
        ["generate", "contact", "--descriptors", str(bad), "--out", str(out)],
        str(bad),
        "not valid JSON",
    )
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]  # no temporary directory left behind


def test_empty_descriptor_list(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "descriptors.json"
    bad.write_text(json.dumps({"ability": {"auditory": []}}))
    _fails(
        capsys,
        ["generate", "contact", "--descriptors", str(bad), "--out", str(tmp_path / "o")],
        str(bad),
        "no descriptors",
    )


def test_wrong_entry_type_names_its_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "descriptors.json"
    bad.write_text(json.dumps({"ability": {"auditory": [{"term": "Deaf"}]}}))
    _fails(
        capsys,
        ["generate", "contact", "--descriptors", str(bad), "--out", str(tmp_path / "o")],
        "ability.auditory[0]",
        "descriptor",
    )


def test_template_variant_without_placeholder(tmp_path: Path, capsys) -> None:
    from scd.data_gen.templates import templates_path

    text = templates_path().read_text()
    bad = tmp_path / "templates.yaml"
    bad.write_text(
        text.replace(
            "preface: Playing with [descriptor] <players> during matches was challenging.",
            "preface: Playing during matches was challenging.",
        )
    )
    desc = tmp_path / "d.json"
    desc.write_text(json.dumps({"a": {"b": ["tall"]}}))
    _fails(
        capsys,
        [
            "generate",
            "contact",
            "--descriptors",
            str(desc),
            "--templates",
            str(bad),
            "--out",
            str(tmp_path / "o"),
        ],
        str(bad),
        "templates[2].negative_contact.preface",
        "never mentions the group",
    )
    bad.write_text(text.replace("principle: common_goals", "principle: shared_goals", 1))
    _fails(
        capsys,
        [
            "generate",
            "contact",
            "--descriptors",
            str(desc),
            "--templates",
            str(bad),
            "--out",
            str(tmp_path / "o"),
        ],
        "shared_goals",
    )
    bad.write_text(text.replace("[descriptor] <doctors> to my family", "[descriptor] doctors"))
    _fails(
        capsys,
        [
            "generate",
            "contact",
            "--descriptors",
            str(desc),
            "--templates",
            str(bad),
            "--out",
            str(tmp_path / "o"),
        ],
        "marked noun",
    )


def test_unwritable_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    desc = tmp_path / "d.json"
    desc.write_text(json.dumps({"a": {"b": ["tall"]}}))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _fails(
        capsys,
        ["generate", "contact", "--descriptors", str(desc), "--out", str(blocker / "sub")],
        "--out",
        "cannot write",
    )
    _fails(
        capsys,
        ["generate", "contact", "--descriptors", str(desc), "--out", str(blocker)],
        "not a directory",
    )


def test_unknown_setting_and_missing_prompts(tmp_path: Path, capsys, hb_prompts: Path) -> None:
    _fails(
        capsys,
        [
            "generate",
            "sft",
            "--prompts",
            str(hb_prompts),
            "--setting",
            "9",
            "--out",
            str(tmp_path / "o"),
        ],
        "--setting 9",
    )
    _fails(
        capsys,
        [
            "generate",
            "sft",
            "--prompts",
            str(tmp_path),
            "--setting",
            "1",
            "--out",
            str(tmp_path / "o"),
        ],
        "no prompts.parquet",
    )
    assert not (tmp_path / "o").exists()


def test_unknown_subcommand_is_one_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["generate", "contact", "--descriptors"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_command_line_prints_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "descriptors.json"
    bad.write_text("[")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scd",
            "generate",
            "contact",
            "--descriptors",
            str(bad),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("scd: error: ") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_holistic_bias_is_downloaded_once_and_validated(
    tmp_path: Path, hb_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = hb_data_dir / "holistic_bias"
    monkeypatch.setenv("SCD_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SCD_DATA_MIRROR", hb_data_dir.as_uri())  # <mirror>/holistic_bias/...
    ds = resolve_descriptors("holistic_bias", version="v1.1", noun_phrases=True)
    cached = tmp_path / "cache/holistic_bias/v1.1/descriptors.json"
    assert cached.read_bytes() == (source / "v1.1/descriptors.json").read_bytes()
    assert ds.source["version"] == "v1.1" and len(ds.descriptors) > 579
    broken = tmp_path / "broken" / "holistic_bias"
    (broken / "v1.0").mkdir(parents=True)
    (broken / "v1.0/descriptors.json").write_text("<html>not json</html>")
    monkeypatch.setenv("SCD_DATA_MIRROR", broken.parent.as_uri())
    with pytest.raises(InputError, match="not the pinned file"):
        resolve_descriptors("holistic_bias", version="v1.0")
    assert not (tmp_path / "cache/holistic_bias/v1.0/descriptors.json").exists()
    monkeypatch.setenv("SCD_DATA_MIRROR", (tmp_path / "nowhere").as_uri())
    with pytest.raises(InputError, match="put v1.0/descriptors.json in .*SCD_DATA_MIRROR"):
        resolve_descriptors("holistic_bias", version="v1.0")


def test_missing_paths_are_named_as_missing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = str(tmp_path / "o")
    _fails(
        capsys,
        ["generate", "contact", "--descriptors", "data/my.json", "--out", out],
        "--descriptors data/my.json: no such file",
    )
    _fails(
        capsys,
        ["generate", "contact", "--descriptors", str(tmp_path), "--out", out],
        "a directory, not a file",
    )
    _fails(
        capsys,
        ["generate", "sft", "--prompts", str(tmp_path / "nope"), "--setting", "1", "--out", out],
        "no such directory",
    )
    assert not (tmp_path / "o").exists()
