"""The reference for the vLLM engine's scores: ``prompt_logprobs`` over prompt + option (slow:
no prefix cache, full-vocabulary logits at every position), used only to check
:meth:`scd.eval.engines.vllm.VLLMEngine.score`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scd.eval.engines import ChoiceRequest


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


def reference_score(engine: Any, requests: list[ChoiceRequest]) -> list[list[float]]:
    """The engine's scores of ``requests``, from ``prompt_logprobs``."""
    seqs = [list(r.prompt_ids) + list(o) for r in requests for o in r.option_ids]
    params = engine._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    outs = engine._run(seqs, params)
    spans = [len(o) for r in requests for o in r.option_ids]
    flat = [option_logprob(o.prompt_logprobs, s, k) for o, s, k in zip(outs, seqs, spans)]
    result, k = [], 0
    for r in requests:
        result.append(flat[k : k + len(r.option_ids)])
        k += len(r.option_ids)
    return result
