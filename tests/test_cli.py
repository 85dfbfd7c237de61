"""The command line: every option explains itself, and a mistyped flag is named."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest

from scd.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]


def _parsers(parser: argparse.ArgumentParser, name: str = "scd"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _parsers(p, f"{name} {sub}")


def test_every_option_has_help_and_shows_its_default():
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help"
    text = dict(_parsers(build_parser()))["scd eval bias"].format_help()
    assert "(default: 512)" in text and "(default: choice)" in text
    assert "(default: None)" not in text


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["eval", "bias", "--model", "m", "--prompts", "p", "--ouput", "o"],
            "unrecognized arguments: --ouput (did you mean --out?)",
        ),
        (["eval", "bias", "--ouput", "o"], "--ouput (did you mean --out?)"),
        (
            ["eval", "bias", "--model", "m", "--prompts", "p", "--out", "o", "--limt", "3"],
            "--limt (did you mean --limit?)",
        ),
        (["train", "r.yaml", "--sett", "a=b"], "--sett (did you mean --set?)"),
        (["eval", "bias", "--model", "m"], "the following arguments are required: --prompts"),
        (
            ["eval", "bias", "--model", "m", "--prompt", "p", "--out", "o"],
            "--prompt (did you mean --prompts?)",
        ),  # no abbreviations: it would have run
        (["run", "r.yaml", "--setting", "3"], "--setting (did you mean --set run.settings=[N]"),
        (  # a flag of other commands and close to one of this one: both said
            ["run", "r.yaml", "--out", "o"],
            "--out (did you mean --outputs? --out is an option of scd generate contact, ",
        ),
        (
            ["eval", "mlm", "--model", "m", "--prompts", "p", "--out", "o", "--steer", "x"],
            "--steer (did you mean --seed? --steer is an option of scd eval bias, scd eval bbq",
        ),
        (  # a causal LM's engine option on a masked-LM command: not a misspelling
            ["eval", "mlm", "--model", "m", "--prompts", "p", "--out", "o", "--prefix-cache"],
            "--prefix-cache (an option of scd eval bias, scd eval bbq and ",
        ),
    ],
)
def test_a_mistyped_flag_is_named_before_a_missing_one(argv, expected):
    code, err = _run(argv)
    assert code == 2 and expected in err and err.count("\n") == 1


def test_an_engine_option_shows_only_where_the_command_runs_a_model_it_applies_to():
    """The prefix cache and steering act on a causal LM: no flag on the masked-LM and
    classifier probes, a flag wherever a causal LM is scored."""
    helps = {prog: p.format_help() for prog, p in _parsers(build_parser())}
    for prog in ("scd eval mlm", "scd eval sentiment"):
        assert "--prefix-cache" not in helps[prog] and "--steer" not in helps[prog], prog
        assert "--batch-size" in helps[prog]  # the engine's other options stay
    for prog in ("scd eval bias", "scd eval bbq", "scd eval aq27"):
        assert "--no-prefix-cache" in helps[prog] and "--steer" in helps[prog], prog


def test_quickstart_help_says_what_where_and_how_long():
    text = dict(_parsers(build_parser()))["scd quickstart"].format_help()
    for words in ("toy", "planted", "report", "--out", "outputs/quickstart", "About a minute"):
        assert words in text


# ---- bad input: one line, exit 2, nothing written (issue 16's cases)


def _fails(argv: list[str], *needles: str) -> str:
    code, err = _run(argv)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture()
def prompts(tmp_path):
    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import resolve_descriptors

    write_prompts(tmp_path / "p", resolve_descriptors("toy"))
    return tmp_path / "p"


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--batch-size", "0", "expected a positive number, got 0"),
        ("--chunk-size", "-3", "expected a positive number"),
        ("--limit", "0", "expected a positive number"),
        ("--max-new-tokens", "x", "expected an integer, got 'x'"),
        ("--device", "tpu7", "expected cpu, cuda, cuda:N or mps, got 'tpu7'"),
    ],
)
def test_bad_numbers_and_devices_are_refused_where_parsed(tmp_path, prompts, flag, value, needle):
    out = tmp_path / "out"
    _fails(
        [
            "eval",
            "bias",
            "--model",
            str(tmp_path),
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            flag,
            value,
        ],
        flag,
        needle,
    )
    assert not out.exists()


def test_cuda_without_a_gpu_is_one_line(toy_model, prompts, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "out"
    _fails(
        [
            "eval",
            "bias",
            "--model",
            str(toy_model),
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            "--device",
            "cuda",
        ],
        "--device cuda: no CUDA GPU",
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (
            "train.per_device_train_batch_size=-1",
            "train.per_device_train_batch_size: expected a positive number, got -1",
        ),
        ("train.learning_rate=-1e-4", "train.learning_rate: expected a number > 0"),
        ("train.num_train_epochs=0", "train.num_train_epochs: expected a number > 0"),
        ("train.max_steps=0", "train.max_steps"),
        ("lora.dropout=1.5", "lora.dropout"),
        ("data.max_train=0", "data.max_train"),
        ("eval.shards=0", "eval.shards: expected a positive number, got 0"),
    ],
)
def test_recipe_numbers_that_would_hang_training_are_refused(tmp_path, override, needle):
    recipe = REPO / "recipes" / "quickstart.yaml"
    for command in ("train", "run"):
        _fails(
            [command, str(recipe), "--set", override, "--outputs", str(tmp_path)],
            f"--set {override}: ",
            needle,
        )
    assert not any(tmp_path.iterdir())


def test_unreadable_recipes_are_one_line(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("model: caf\xe9\n".encode("latin-1"))
    _fails(["train", str(latin)], "latin.yaml: not UTF-8 text")
    _fails(["run", str(tmp_path)], "a directory, not a recipe file")


def test_toy_model_under_a_file_fails_before_training(tmp_path):
    import time

    (tmp_path / "file").write_text("x")
    start = time.perf_counter()
    _fails(["toy-model", "--out", str(tmp_path / "file" / "model")], "is a file, not a directory")
    assert time.perf_counter() - start < 10


def test_an_eval_out_dir_with_unrelated_files_is_refused(toy_model, prompts, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    _fails(
        [
            "eval",
            "bias",
            "--model",
            str(toy_model),
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            "--limit",
            "3",
        ],
        "holds no scd evaluation",
    )
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_an_out_dir_holding_another_kind_of_output_is_refused(toy_model, tmp_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(toy_model, model)
    before = sorted(p.name for p in model.iterdir())
    _fails(
        ["generate", "contact", "--descriptors", "toy", "--out", str(model)],
        "holds a toy_model output, not contact_prompts",
    )
    assert sorted(p.name for p in model.iterdir()) == before


def test_a_bbq_row_of_an_unknown_category_names_file_and_line(shared_data, tmp_path):
    import json

    rows = (shared_data / "bbq" / "data" / "Age.jsonl").read_text().splitlines()[:3]
    bad = json.loads(rows[1])
    bad["category"] = "Hair_colour"
    path = tmp_path / "Age.jsonl"
    path.write_text("\n".join([rows[0], json.dumps(bad), rows[2]]) + "\n")
    _fails(
        [
            "eval",
            "bbq",
            "--model",
            str(tmp_path),
            "--data",
            str(path),
            "--out",
            str(tmp_path / "o"),
        ],
        f"{path}:2: category 'Hair_colour'",
    )


def test_setting_8_over_a_list_without_some_axes_says_what_it_used(prompts, tmp_path, capsys):
    import json

    assert (
        main(
            [
                "generate",
                "sft",
                "--prompts",
                str(prompts),
                "--setting",
                "8",
                "--out",
                str(tmp_path / "s8"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: setting 8: trains on 4 of the 6 axis values" in err
    manifest = json.loads((tmp_path / "s8" / "manifest.json").read_text())
    assert manifest["used"]["eval"]["axis"] == [
        "nationality",
        "political_ideologies",
        "religion",
        "socioeconomic_class",
    ]
    assert (
        "these prompts have no nonce, race_ethnicity, sexual_orientation"
        in (manifest["description"])
    )


def test_scd_train_takes_the_quickstart_recipe_as_scd_run_does(toy_model, tmp_path):
    import shutil

    from scd.io import cache_key

    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "cache" / "toy-model" / key)  # as scd run caches it
    recipe = REPO / "recipes" / "quickstart.yaml"
    code, err = _run(
        [
            "train",
            str(recipe),
            "--outputs",
            str(tmp_path),
            "--set",
            "train.max_steps=2",
            "--set",
            "data.max_train=8",
            "--no-wandb",
        ]
    )
    assert code == 0, err
    adapter = tmp_path / "train" / "quickstart"
    assert (adapter / "adapter_model.safetensors").is_file()


def test_set_and_yaml_problems_say_where_they_come_from(tmp_path):
    recipe = REPO / "recipes" / "quickstart.yaml"
    _fails(
        ["train", str(recipe), "--set", "lora.alpah=4"],
        "--set lora.alpah=4: unknown key 'lora.alpah' (did you mean 'lora.alpha'?)",
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: toy\ndata: {descriptors: toy\n")
    _fails(["run", str(bad)], "bad.yaml: not valid YAML (line 3: expected ',' or '}'")


def test_a_model_is_a_path_an_owner_name_id_or_toy(toy_model, tmp_path, monkeypatch):
    import shutil

    from scd.io import cache_key

    prompts = tmp_path / "p"
    assert main(["generate", "contact", "--descriptors", "toy", "--out", str(prompts)]) == 0
    args = ["eval", "bias", "--prompts", str(prompts), "--limit", "6", "--device", "cpu"]
    _fails(
        [*args, "--model", "smollm", "--out", str(tmp_path / "o")],
        "--model smollm: neither an existing path nor a Hub id (owner/name)",
    )
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "outputs" / "cache" / "toy-model" / key)
    monkeypatch.chdir(tmp_path)  # `toy` is scd run's default toy model, cached in outputs/cache
    assert _run([*args, "--model", "toy", "--out", str(tmp_path / "toy")])[0] == 0
    assert (tmp_path / "toy" / "summary.json").is_file()


def test_a_section_that_is_not_a_mapping_is_one_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: toy\neval: 3\n")
    code, err = _run(["run", str(recipe), "--outputs", str(tmp_path / "o")])
    assert code == 2 and "eval must be a mapping" in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_a_long_error_line_is_cut_between_values_never_inside_one():
    from scd.errors import first_line

    shape = "torch.Size([8, 576])"
    text = (
        f"size mismatch for q_proj.lora_A.weight: couldn't copy a param with shape {shape} "
        "from checkpoint, the shape in current model is torch.Size([8, 896]) and more"
    )
    for limit in range(60, len(text)):
        line = first_line(RuntimeError(text), limit=limit)
        assert line.endswith(" ...") and len(line) <= limit + 4
        kept = line.removesuffix(" ...")
        assert text.startswith(kept) and kept.count("(") == kept.count(")")  # no value half-cut
    assert first_line(RuntimeError(text), limit=len(text)) == text
    assert first_line(RuntimeError("x" * 300)) == "x" * 300  # no place to cut: kept whole


def test_the_command_line_imports_no_heavy_library_until_a_command_needs_it():
    """`scd --help` and every parser build stay fast (BENCHMARKS.md: bench_startup.py): the
    CLI, with every benchmark's options, loads none of scipy, pyarrow, pandas, torch or the
    Hugging Face libraries (each benchmark imports them where it uses them)."""
    import subprocess
    import sys

    heavy = (
        "scipy",
        "pyarrow",
        "pandas",
        "torch",
        "transformers",
        "datasets",
        "statsmodels",
        "huggingface_hub",
        "matplotlib",
    )
    probe = (
        "import sys, scd.cli; scd.cli.build_parser(); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
