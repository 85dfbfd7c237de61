"""Options defined once: the command line and the recipe schema come from the same fields, the
engines take an EngineSpec, and errors name a flag or a recipe key depending on the caller."""

from __future__ import annotations

import dataclasses
import inspect
import json
import shutil
from pathlib import Path

import pytest

from scd.cli import build_parser, main
from scd.config.schema import SFTOptions
from scd.errors import InputError
from scd.eval.engines import ENGINES, engine_class, engine_spec


def _flags(*argv: str) -> dict[str, object]:
    """The options of a subcommand: flag -> default (``--x`` and ``--no-x`` both)."""
    parser = build_parser()
    sub = parser
    for word in argv:
        sub = next(a for a in sub._actions if a.dest in ("command", "what")).choices[word]
    return {flag: a.default for a in sub._actions for flag in a.option_strings}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@pytest.mark.parametrize("command", [("eval", "bias"), ("eval", "bbq"), ("eval", "stigma")])
def test_every_evaluation_takes_every_engine_option_with_its_default(command) -> None:
    flags = _flags(*command)
    assert flags["--backend"] == "hf"
    for name in ENGINES:
        for f in dataclasses.fields(engine_class(name).Options):
            if f.name != "backend":
                assert flags[_flag(f.name)] == f.default, (name, f.name)


def test_recipe_and_command_line_share_the_engine_and_sft_options() -> None:
    from scd.config.schema import DataSpec, eval_spec_class

    for name in ENGINES:  # eval.backend: NAME takes that engine's options as keys
        eval_keys = {f.name for f in dataclasses.fields(eval_spec_class(backend=name))}
        assert {f.name for f in dataclasses.fields(engine_class(name).Options)} <= eval_keys
    sft = _flags("generate", "sft")
    for f in dataclasses.fields(SFTOptions):
        assert sft[_flag(f.name)] == f.default == getattr(DataSpec(), f.name), f.name


def test_one_check_refuses_a_value_on_the_command_line_and_in_a_recipe(tmp_path, capsys) -> None:
    from scd.pipeline.recipe import recipe_from_dict

    with pytest.raises(SystemExit) as exit_:  # argparse's one-line error
        main(
            [
                "eval",
                "bias",
                "--model",
                "m",
                "--prompts",
                "p",
                "--out",
                str(tmp_path / "o"),
                "--backend",
                "vllm",
                "--gpu-memory-utilization",
                "1.5",
            ]
        )
    assert exit_.value.code == 2 and "expected 0 < f <= 1, got 1.5" in capsys.readouterr().err
    recipe = {"model": "toy", "data": {"descriptors": "toy"}}
    with pytest.raises(InputError, match="eval.gpu_memory_utilization: expected 0 < f <= 1, got"):
        recipe_from_dict({**recipe, "eval": {"backend": "vllm", "gpu_memory_utilization": 1.5}})
    with pytest.raises(InputError, match="data.general_fraction: expected 0 <= f < 1, got 1"):
        recipe_from_dict({**recipe, "data": {"descriptors": "toy", "general_fraction": 1}})
    with pytest.raises(SystemExit):
        main(
            [
                "generate",
                "sft",
                "--prompts",
                "p",
                "--setting",
                "1",
                "--out",
                "o",
                "--general-fraction",
                "1",
            ]
        )
    assert "expected 0 <= f < 1, got 1.0" in capsys.readouterr().err


def test_engines_take_a_spec_and_no_loose_options() -> None:
    from scd.eval.engines import SharedEngine, make_engine
    from scd.eval.engines.hf import HFEngine
    from scd.eval.engines.vllm import VLLMEngine

    for fn in (make_engine, HFEngine, VLLMEngine, SharedEngine):
        kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, fn
    with pytest.raises(InputError, match="--batch-sise 8: not an option of the hf engine"):
        engine_spec(batch_sise=8)  # a typo cannot pass unnoticed
    with pytest.raises(TypeError):
        engine_class("hf").Options(batch_sise=8)  # type: ignore[call-arg]
    assert engine_spec("vllm", tensor_parallel_size=2).engine_options() == {
        "dtype": "auto",
        "tensor_parallel_size": 2,
    }


def test_cache_keys_resolve_the_auto_dtype() -> None:
    import torch

    assert engine_spec(device="cpu").cache_identity()["dtype"] == "float32"
    assert engine_spec(device="cuda").cache_identity()["dtype"] == "bfloat16"  # no GPU needed
    here = "bfloat16" if torch.cuda.is_available() else "float32"  # one rule for every engine
    assert engine_spec("vllm").cache_identity()["dtype"] == here
    assert engine_spec(device="cpu", dtype="float16").cache_identity()["dtype"] == "float16"


def test_speed_options_are_recorded_and_a_run_resumes_with_others(
    toy_model: Path, toy_prompts: Path, tmp_path: Path
) -> None:
    from scd.eval.benchmarks import get

    out = tmp_path / "out"
    first = get("bias").evaluate(
        str(toy_model),
        out,
        prompts=toy_prompts,
        limit=30,
        progress=False,
        engine=engine_spec(device="cpu", batch_size=4),
    )
    pinned = json.loads((out / "run.json").read_text())
    assert pinned["dtype"] == "auto" and "batch_size" not in pinned
    assert first["run"]["engine"]["batch_size"] == 4
    again = get("bias").evaluate(
        str(toy_model),
        out,
        prompts=toy_prompts,
        limit=30,
        progress=False,
        engine=engine_spec(device="cpu", batch_size=16),
    )
    assert again["overall"] == first["overall"] and again["run"]["engine"]["batch_size"] == 16
    with pytest.raises(InputError, match="another configuration .*system_prompt"):
        get("bias").evaluate(
            str(toy_model),
            out,
            prompts=toy_prompts,
            limit=30,
            progress=False,
            engine=engine_spec(device="cpu", system_prompt="Be fair."),
        )


def test_errors_name_the_flag_or_the_recipe_key() -> None:
    from scd.pipeline.recipe import in_recipe_terms

    err = InputError("above the model's context length 2048", key="max_model_len", value=8192)
    assert str(err) == "--max-model-len 8192: above the model's context length 2048"
    run = str(in_recipe_terms(err, "base/bias", "eval.bias"))
    assert run == "stage base/bias: eval.max_model_len 8192: above the model's context length 2048"
    limit = InputError("expected a positive number", key="limit", value=0)
    bbq, bias = (
        in_recipe_terms(limit, "base/bbq", "eval.bbq"),
        in_recipe_terms(limit, "b", "eval.bias"),
    )
    assert str(bbq).startswith("stage base/bbq: eval.bbq.limit 0:")
    assert str(bias).startswith("stage b: eval.bias.limit")
    seed = InputError("expected an integer", key="seed", value="x")
    assert str(in_recipe_terms(seed, "prompts", None)).startswith("stage prompts: data.seed x:")
    plain = InputError("data.prompts: x has no prompts.parquet")
    assert str(in_recipe_terms(plain, None)) == "data.prompts: x has no prompts.parquet"


def test_scd_run_reports_a_bad_input_by_its_recipe_key_before_any_stage(
    toy_model: Path, tmp_path: Path, capsys
) -> None:
    from scd.io import cache_key

    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "cache" / "toy-model" / key)
    recipe = tmp_path / "recipe.yaml"
    missing = tmp_path / "missing.json"
    recipe.write_text(f"model: toy\ndata:\n  descriptors: {missing}\nwandb:\n  enabled: false\n")
    assert main(["run", str(recipe), "--outputs", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("scd: error: data.descriptors "), err
    assert str(missing) in err[0] and "--descriptors" not in err[0] and "no such file" in err[0]
    assert not (tmp_path / "recipe").exists()  # read before any stage: nothing written


def test_scd_debug_shows_the_library_error(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "model").mkdir()  # a directory without a model
    argv = [
        "eval",
        "bias",
        "--model",
        str(tmp_path / "model"),
        "--prompts",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
    ]
    (tmp_path / "prompts.parquet").write_bytes(b"")
    assert main(argv) == 2
    quiet = capsys.readouterr().err
    assert "Traceback" not in quiet and quiet.count("\n") == 1
    monkeypatch.setenv("SCD_DEBUG", "1")
    assert main(argv) == 2
    loud = capsys.readouterr().err
    assert "Traceback" in loud and loud.rstrip().splitlines()[-1] == quiet.rstrip()
    assert "During handling of the above exception" in loud  # the cause hidden by `from None`


def test_a_bool_on_by_default_can_be_turned_off_on_the_command_line() -> None:
    from scd.cli import build_parser

    base = ["eval", "bbq", "--model", "m", "--data", "d", "--out", "o"]
    parse = build_parser().parse_args
    assert parse(base).chat_template is True
    assert parse([*base, "--no-chat-template"]).chat_template is False
    aq27 = ["eval", "aq27", "--model", "m", "--prompts", "p", "--out", "o"]
    assert parse(aq27).in_vocabulary is None  # by the model's kind: masked on, causal off
    assert parse([*aq27, "--in-vocabulary"]).in_vocabulary is True
    assert parse([*aq27, "--no-in-vocabulary"]).in_vocabulary is False
