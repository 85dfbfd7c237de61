"""How a model is run: the engines by name and their options (:class:`EngineSpec`).

An engine is a class behind :class:`scd.eval.engines.Engine`, found by name in :data:`ENGINES`
and imported only when asked for; its options are fields of :class:`EngineSpec` tagged with its
``backend``. Whether an option changes what a model answers (pinned with a result and in cache
keys) or only speed and memory (recorded) is its field's ``speed`` metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, Literal

from scd.config.options import (
    Options,
    above_zero,
    device_name,
    field_problems,
    http_url,
    non_negative,
    option,
    positive,
    share,
)

__all__ = ["ENGINES", "EVAL_BATCH_SIZE", "LORA_RANKS", "EngineSpec", "resolve_dtype"]

ENGINES = {  # backend -> "module:Class", imported when used
    "hf": "scd.eval.engines.hf:HFEngine",
    "vllm": "scd.eval.engines.vllm:VLLMEngine",
    "openai": "scd.eval.engines.served:ServedEngine",
}
Backend = Literal[tuple(ENGINES)]  # type: ignore[valid-type]  # the names above
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
ScoreVia = Literal["token_ids", "echo"]
ServedApi = Literal["completions", "chat"]
EVAL_BATCH_SIZE = 32  # hf engine and the stigma pipelines: prompts per forward pass
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # ranks vLLM serves (max_lora_rank)


def resolve_dtype(dtype: str, device: str | None = None) -> str:
    """What ``auto`` means on a device (default: this machine's): bfloat16 on a CUDA GPU, float32
    elsewhere -- for every engine, so that a result never depends on which engine made it."""
    if dtype != "auto":
        return dtype
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "bfloat16" if device.startswith("cuda") else "float32"


@dataclass
class EngineSpec(Options):
    """How a model is run. ``None``: the engine's default. Fields without ``speed`` change what
    a model answers (:meth:`identity`); the others change speed and memory only."""

    backend: Backend = option(
        "hf",
        "hf: transformers (CPU or GPU); vllm: vLLM (GPU or CPU build); openai: a model "
        "behind an OpenAI-compatible server (vllm serve, ...) at --base-url",
    )
    dtype: Dtype = option("auto", "weights' dtype; auto: bfloat16 on CUDA, float32 on CPU")
    batch_size: int | None = option(
        None,
        f"prompts per forward (default: {EVAL_BATCH_SIZE})",
        check=positive,
        backend="hf",
        speed=True,
    )
    device: str | None = option(
        None,
        "cpu, cuda, cuda:1 (default: cuda if available)",
        check=device_name,
        backend="hf",
        speed=True,
    )
    tensor_parallel_size: int | None = option(
        None, "GPUs per model (default: 1)", check=positive, backend="vllm", speed=True
    )
    max_model_len: int | None = option(
        None,
        "context to reserve KV cache for (default: the model's, at most 4096)",
        check=positive,
        backend="vllm",
        speed=True,
    )
    gpu_memory_utilization: float | None = option(
        None,
        "share of GPU memory vLLM may take (default: 0.9)",
        check=share,
        backend="vllm",
        speed=True,
    )
    kv_cache_space: float | None = option(
        None,
        "GiB for vLLM's KV cache (default: 4 on a CPU; on a GPU what "
        "--gpu-memory-utilization leaves)",
        check=above_zero,
        backend="vllm",
        speed=True,
    )
    base_url: str | None = option(
        None,
        "the server's OpenAI API, e.g. http://127.0.0.1:8000/v1",
        check=http_url,
        backend="openai",
    )  # pinned: another server may serve another model under the same name
    served_model: str | None = option(
        None,
        "the model's name on the server (default: the one base model it lists)",
        backend="openai",
    )
    api: ServedApi | None = option(
        None,
        "completions: token-id prompts, exact option log-probs (vllm serve); chat: "
        "conversations as text (hosted chat APIs): generate mode, or the first answer token's "
        "top-20 log-probs (one-word options; scd eval bias) (default: completions)",
        backend="openai",
    )
    score_via: ScoreVia | None = option(
        None,
        "how the server gives option log-probs: token_ids (vLLM's logprob_token_ids, "
        "reads its prefix cache) or echo (echo + logprobs of prompt and option, one request per "
        "option) (default: token_ids)",
        backend="openai",
    )
    api_key_env: str | None = option(
        None,
        "environment variable holding the API key, sent as a bearer token and nowhere "
        "else (default: OPENAI_API_KEY for api.openai.com, no key elsewhere)",
        backend="openai",
        speed=True,
    )
    concurrency: int | None = option(
        None,
        "requests in flight at once (default: 8)",
        check=positive,
        backend="openai",
        speed=True,
    )
    request_timeout: float | None = option(
        None,
        "seconds to wait for one answer (default: 300)",
        check=above_zero,
        backend="openai",
        speed=True,
    )
    retries: int | None = option(
        None,
        "tries again after a timeout, a dropped connection, a malformed answer, 429 or 5xx, "
        "backing off (default: 5)",
        check=non_negative,
        backend="openai",
        speed=True,
    )
    system_prompt: str | None = option(None, "system message put before every prompt")

    def identity(self) -> dict[str, Any]:
        """The fields that change what a model answers: pinned and in cache keys."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(EngineSpec)
            if not f.metadata["speed"] and f.metadata["backend"] in (None, self.backend)
        }  # another engine's options are unset (problems()): left out, so adding one to an
        # engine changes no earlier run's pinned config or cache key

    def cache_identity(self) -> dict[str, Any]:
        """:meth:`identity` with ``auto`` dtype resolved to what it means on this machine, for
        keys of a cache that CPU and GPU machines may share."""
        return {**self.identity(), "dtype": resolve_dtype(self.dtype, self.device)}

    def engine_options(self) -> dict[str, Any]:
        """The options the engine's constructor takes: this backend's, those that are set."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(EngineSpec)
            if getattr(self, f.name) is not None
            and (f.name == "dtype" or f.metadata["backend"] == self.backend)
        }

    def engine(self) -> EngineSpec:
        """The engine options alone (a recipe's ``eval`` section holds more)."""
        return EngineSpec(**{f.name: getattr(self, f.name) for f in fields(EngineSpec)})

    def problems(self) -> Iterator[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad value, an option of the other backend
        included (so a typo'd or misplaced option is never ignored)."""
        yield from field_problems(self)
        if self.backend == "openai" and not self.base_url:
            yield "base_url", "the server's API is needed, e.g. http://127.0.0.1:8000/v1"
        for f in fields(EngineSpec):
            owner = f.metadata["backend"]
            if owner and owner != self.backend and getattr(self, f.name) is not None:
                yield f.name, f"an option of the {owner} backend, not of {self.backend}"
