"""A recording stand-in for the ``vllm`` package (vLLM needs CUDA; tests run on CPU).

``FakeLLM`` answers ``generate`` the way vLLM 0.33 shapes its outputs, from a real transformers
model (with the PEFT adapter of a request's ``LoRARequest``), and records every request. It also
keeps a token-level prefix cache so that tests can count the prompt tokens vLLM would compute:
a request that sets ``prompt_logprobs`` skips reading the cache (``skip_reading_prefix_cache``,
vllm/sampling_params.py), as vLLM does.
"""

from __future__ import annotations

import contextlib
import sys
import types
from dataclasses import dataclass
from typing import Any

import torch

MAX_LOGPROB_TOKEN_IDS = 128
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.max_tokens = kwargs.get("max_tokens", 16)
        self.temperature = kwargs.get("temperature", 1.0)
        self.prompt_logprobs = kwargs.get("prompt_logprobs")
        self.logprob_token_ids = kwargs.get("logprob_token_ids")
        ids = self.logprob_token_ids
        if ids is not None and len(ids) > MAX_LOGPROB_TOKEN_IDS:
            raise ValueError(f"logprob_token_ids: at most {MAX_LOGPROB_TOKEN_IDS} ids")
        self.skip_reading_prefix_cache = self.prompt_logprobs is not None


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[int, Logprob] | None] | None
    outputs: list[CompletionOutput]


@dataclass
class Request:
    prompt_token_ids: list[int]
    params: SamplingParams
    lora: LoRARequest | None
    computed_tokens: int  # prompt tokens not read from the prefix cache


class FakeLLM:
    """Records the engine arguments and every request; computes real log-probabilities."""

    instances: list[FakeLLM] = []  # every FakeLLM made

    def __init__(self, model: str, **kwargs: Any) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        context = AutoConfig.from_pretrained(model).max_position_embeddings
        if kwargs.get("max_model_len") and kwargs["max_model_len"] > context:
            raise ValueError(f"max_model_len {kwargs['max_model_len']} > context {context}")
        if kwargs.get("enable_lora") and kwargs.get("max_lora_rank") not in MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank {kwargs.get('max_lora_rank')} is not allowed")
        self.model, self.kwargs, self.requests = model, kwargs, []
        self.base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.adapted: dict[str, Any] = {}
        self.cache: set[tuple] = set()
        FakeLLM.instances.append(self)

    def _model(self, lora: LoRARequest | None) -> Any:
        if lora is None:
            return self.base
        if not self.kwargs.get("enable_lora"):
            raise ValueError("LoRA request on an engine started without enable_lora")
        if lora.lora_path not in self.adapted:
            from peft import PeftModel
            from transformers import AutoModelForCausalLM

            base = AutoModelForCausalLM.from_pretrained(self.model, dtype=torch.float32)
            self.adapted[lora.lora_path] = PeftModel.from_pretrained(base, lora.lora_path).eval()
        return self.adapted[lora.lora_path]

    def _computed(self, ids: list[int], params: SamplingParams, lora: Any) -> int:
        key = lora.lora_int_id if lora else 0
        cached = 0
        if not params.skip_reading_prefix_cache:
            cached = max(
                (n for n in range(len(ids) + 1) if (key, *ids[:n]) in self.cache), default=0
            )
        for n in range(1, len(ids) + 1):
            self.cache.add((key, *ids[:n]))
        return len(ids) - cached

    @torch.inference_mode()
    def generate(
        self, prompts: list[dict], sampling_params: Any, lora_request: Any = None, use_tqdm=True
    ) -> list[RequestOutput]:
        params = sampling_params
        if not isinstance(params, list):
            params = [params] * len(prompts)
        outputs = []
        for prompt, p in zip(prompts, params):
            ids = list(prompt["prompt_token_ids"])
            self.requests.append(
                Request(ids, p, lora_request, self._computed(ids, p, lora_request))
            )
            model = self._model(lora_request)
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            prompt_logprobs = None
            if p.prompt_logprobs is not None:
                prompt_logprobs = [None] + [
                    {t: Logprob(logprobs[i - 1, t].item())} for i, t in enumerate(ids) if i > 0
                ]
            sampled = int(logprobs[-1].argmax())
            step = None
            if p.logprob_token_ids is not None:
                step = {t: Logprob(logprobs[-1, t].item()) for t in p.logprob_token_ids}
                step[sampled] = Logprob(logprobs[-1, sampled].item(), rank=1)
            tokens = [sampled]
            if p.max_tokens > 1:
                new = model.generate(
                    input_ids=torch.tensor([ids]), max_new_tokens=p.max_tokens, do_sample=False
                )[0, len(ids) :]
                tokens = new.tolist()
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            outputs.append(
                RequestOutput(
                    ids,
                    prompt_logprobs,
                    [CompletionOutput(0, text, tokens, [step] if step is not None else None)],
                )
            )
        return outputs


def install(monkeypatch: Any) -> type[FakeLLM]:
    """Put the fake ``vllm`` package in ``sys.modules``; vLLM's platform: a CUDA GPU."""
    with contextlib.suppress(ImportError):  # TRL probes for vllm when imported: not the fake
        import trl  # noqa: F401
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = SamplingParams
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    monkeypatch.setattr("scd.eval.engines.vllm.vllm_platform", lambda: "cuda")
    FakeLLM.instances = []
    return FakeLLM
