"""The vLLM engine (CUDA GPUs): option scoring from next-token log-probabilities that read the
prefix cache, LoRA adapters unmerged.

Kept thin on purpose: everything around it (formatting, batching order, parsing, metrics) is
shared, engine-free code tested on CPU against a recording fake ``LLM``.

Scoring. Each request asks for one next token (``max_tokens=1``) and the exact log-probabilities
of chosen ids at that position (``SamplingParams.logprob_token_ids``: a full-vocabulary
log-softmax gathered at those ids, the prefix cache read). Single-token options need one request
per prompt. A multi-token option ``o`` is scored by chained prefix requests -- prompt + ``o[:i]``
asks for ``o[i]`` -- deduplicated across the options, so "Likely"/"Unlikely" sharing a first
token share a request; every request starts with the same prompt tokens, which vLLM computes
once and then reads from its prefix cache. ``prompt_logprobs`` (which makes vLLM skip the prefix
cache and compute full-vocabulary logits at every prompt position) is kept only as
:meth:`VLLMEngine.reference_score`, the reference the GPU test compares against.

Sizes. ``max_model_len`` defaults to the model's context length capped at
:data:`DEFAULT_MAX_MODEL_LEN` (scd's prompts are a few hundred tokens; a smaller KV-cache
reservation leaves memory for batching); ``max_lora_rank`` is the smallest value vLLM allows that
holds every adapter's ``r`` and ``rank_pattern``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.engines import ChoiceRequest, require_adapter
from scd.options import EngineSpec

__all__ = [
    "DEFAULT_MAX_MODEL_LEN",
    "INSTALL_HINT",
    "LORA_RANKS",
    "MAX_LOGPROB_TOKEN_IDS",
    "VLLMEngine",
    "adapter_rank",
    "lora_rank_for",
    "model_context_length",
    "option_logprob",
]

INSTALL_HINT = "pip install 'scd[vllm]' on a machine with a CUDA GPU, or use --backend hf"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks
MAX_LOGPROB_TOKEN_IDS = 128  # vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS
DEFAULT_MAX_MODEL_LEN = 4096
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


def model_context_length(model: str) -> int | None:
    """The model's context length from its config (``text_config`` for multimodal ones), or
    None when the config does not say."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=False)
    except (OSError, ValueError):
        return None
    for cfg in (config, getattr(config, "text_config", None)):
        for key in _CONTEXT_KEYS:
            value = getattr(cfg, key, None) if cfg is not None else None
            if isinstance(value, int) and value > 0:
                return value
    return None


def option_logprob(prompt_logprobs: Sequence[Any], token_ids: Sequence[int], span: int) -> float:
    """Sum the log-probabilities of the last ``span`` prompt tokens.

    ``prompt_logprobs`` is vLLM's per-position list (element 0 is None), each entry a mapping
    token id -> object with ``.logprob`` (or a float).
    """
    total = 0.0
    for pos in range(len(token_ids) - span, len(token_ids)):
        entry = prompt_logprobs[pos][token_ids[pos]]
        total += float(getattr(entry, "logprob", entry))
    return total


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (vLLM needs one)."""
    import torch

    return torch.cuda.is_available()


def _logprob(entry: Any) -> float:
    return float(getattr(entry, "logprob", entry))


class VLLMEngine:
    """vLLM ``LLM`` behind the engine interface."""

    def __init__(
        self,
        model: str,
        spec: EngineSpec | None = None,
        *,
        tokenizer: Any = None,
        adapters: Sequence[str] = (),
    ) -> None:
        spec = (spec or EngineSpec(backend="vllm")).check()
        max_model_len = spec.max_model_len
        try:
            import vllm
            from vllm.lora.request import LoRARequest
        except ImportError:
            raise InputError(
                f"vLLM is not installed ({INSTALL_HINT})", key="backend", value="vllm"
            ) from None
        if not cuda_available():
            raise InputError(
                f"no CUDA GPU is available ({INSTALL_HINT})", key="backend", value="vllm"
            )
        for path in adapters:
            require_adapter(path)
        context = model_context_length(model)
        if max_model_len is None:
            max_model_len = min(context or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)
        elif context is not None and max_model_len > context:
            raise InputError(
                f"above the model's context length {context}",
                key="max_model_len",
                value=max_model_len,
            )
        self._vllm, self._lora_request = vllm, LoRARequest
        self.tokenizer = tokenizer
        self.max_lora_rank = lora_rank_for(adapters) if adapters else None
        options: dict[str, Any] = {}
        if adapters:
            options = {"enable_lora": True, "max_lora_rank": self.max_lora_rank, "max_loras": 1}
        self.llm = vllm.LLM(
            model=model,
            tensor_parallel_size=spec.tensor_parallel_size or 1,
            dtype=spec.dtype,
            gpu_memory_utilization=spec.gpu_memory_utilization or 0.9,
            max_model_len=max_model_len,
            trust_remote_code=False,
            enable_prefix_caching=True,
            **options,
        )
        self.max_model_len = max_model_len
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
            use_tqdm=False,
        )

    def score(self, requests: list[ChoiceRequest]) -> list[list[float]]:
        """Summed option log-probabilities per request (see the module docstring)."""
        wanted: dict[tuple[int, ...], list[int]] = {}  # prefix -> next tokens to read
        for r in requests:
            for option in r.option_ids:
                for i, token in enumerate(option):
                    tokens = wanted.setdefault(tuple(r.prompt_ids) + tuple(option[:i]), [])
                    if token not in tokens:
                        tokens.append(token)
        prefixes: list[tuple[int, ...]] = []
        params = []
        for prefix, tokens in wanted.items():
            for lo in range(0, len(tokens), MAX_LOGPROB_TOKEN_IDS):
                prefixes.append(prefix)
                params.append(self._vllm.SamplingParams(
                    max_tokens=1, temperature=0.0, detokenize=False,
                    logprob_token_ids=tokens[lo : lo + MAX_LOGPROB_TOKEN_IDS],
                ))  # fmt: skip
        outs = self._run([list(p) for p in prefixes], params)
        logprob: dict[tuple[tuple[int, ...], int], float] = {}
        for prefix, param, out in zip(prefixes, params, outs):
            step = out.outputs[0].logprobs[0]
            for token in param.logprob_token_ids:
                logprob[prefix, token] = _logprob(step[token])
        return [
            [
                sum(logprob[tuple(r.prompt_ids) + tuple(o[:i]), t] for i, t in enumerate(o))
                for o in r.option_ids
            ]
            for r in requests
        ]

    def reference_score(self, requests: list[ChoiceRequest]) -> list[list[float]]:
        """The same scores from ``prompt_logprobs`` over prompt + option (slow: no prefix cache,
        full-vocabulary logits at every position); only for checking :meth:`score`."""
        seqs = [list(r.prompt_ids) + list(o) for r in requests for o in r.option_ids]
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        outs = self._run(seqs, params)
        spans = [len(o) for r in requests for o in r.option_ids]
        flat = [option_logprob(o.prompt_logprobs, s, k) for o, s, k in zip(outs, seqs, spans)]
        result, k = [], 0
        for r in requests:
            result.append(flat[k : k + len(r.option_ids)])
            k += len(r.option_ids)
        return result

    def generate(self, prompt_ids: list[list[int]], max_new_tokens: int) -> list[str]:
        """Greedy continuations."""
        params = self._vllm.SamplingParams(max_tokens=max_new_tokens, temperature=0.0)
        return [o.outputs[0].text.strip() for o in self._run(prompt_ids, params)]

    def close(self) -> None:
        """Shut the engine down and free GPU memory."""
        import gc

        import torch

        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()  # vLLM's engine-core process holds the GPU memory
        self.llm = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
