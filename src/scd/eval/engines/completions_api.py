"""Requests to a completions API (``/v1/completions``) and what scd reads from its answers:
prompts go as token ids, so the scored tokens are exactly scd's.

``token_ids``: one next token per prompt and the log-probabilities of chosen ids at that
position (vLLM's ``logprob_token_ids``, read from its prefix cache). ``echo``: the prompt and an
option sent together, the option's log-probabilities read from the echo of the prompt
(``echo`` + ``logprobs``, which OpenAI-compatible servers besides vLLM offer). Both ask for token
ids in the answer (``return_tokens_as_token_ids``), so that a malformed or mismatched answer is
found, not scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scd.eval.engines.client import Malformed

__all__ = [
    "choices",
    "echo_body",
    "echo_parser",
    "generate_body",
    "ids_body",
    "ids_parser",
    "token_key",
]


def token_key(token: int) -> str:
    return f"token_id:{token}"  # how vLLM names a token with return_tokens_as_token_ids


def choices(answer: Any, n: int) -> list[dict[str, Any]]:
    """The answer's ``n`` choices in prompt order."""
    found = sorted(answer["choices"], key=lambda c: c.get("index", 0))
    if len(found) != n:
        raise Malformed(f"{len(found)} choices for {n} prompts")
    return found


def ids_body(model: str, prompts: Sequence[Sequence[int]], tokens: Sequence[int]) -> dict:
    """Ask for the log-probability of each of ``tokens`` after each prompt."""
    return {
        "model": model,
        "prompt": [list(p) for p in prompts],
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": 1,
        "logprob_token_ids": list(tokens),
        "return_tokens_as_token_ids": True,
    }


def ids_parser(tokens: Sequence[int], n: int) -> Callable[[Any], list[list[float]]]:
    """Read :func:`ids_body`'s answer: per prompt, the log-probability of each token."""

    def parse(answer: Any) -> list[list[float]]:
        out = []
        for choice in choices(answer, n):
            step = choice["logprobs"]["top_logprobs"][0]
            missing = [t for t in tokens if token_key(t) not in step]
            if missing:
                raise Malformed(
                    f"no log-prob for token ids {missing[:3]}: the server ignores logprob_token_ids"
                )
            out.append([float(step[token_key(t)]) for t in tokens])
        return out

    return parse


def echo_body(model: str, prompt: Sequence[int], option: Sequence[int]) -> dict:
    """Send prompt + option and ask for the echo's log-probabilities."""
    return {
        "model": model,
        "prompt": [*prompt, *option],
        "echo": True,
        "logprobs": 0,
        "max_tokens": 1,
        "temperature": 0.0,
        "return_tokens_as_token_ids": True,
    }


def echo_parser(prompt: Sequence[int], option: Sequence[int]) -> Callable[[Any], float]:
    """Read :func:`echo_body`'s answer: the option's summed log-probability after the prompt."""

    def parse(answer: Any) -> float:
        logprobs = choices(answer, 1)[0]["logprobs"]
        values = logprobs["token_logprobs"][len(prompt) : len(prompt) + len(option)]
        tokens = logprobs.get("tokens") or []
        shown = tokens[len(prompt) : len(prompt) + len(option)]
        if len(values) != len(option) or any(v is None for v in values):
            raise Malformed("no prompt log-probs in the echo")
        if (
            shown
            and all(str(t).startswith("token_id:") for t in shown)
            and shown != [token_key(t) for t in option]
        ):
            raise Malformed("the echo holds other tokens than were sent")
        return float(sum(values))

    return parse


def generate_body(
    model: str, prompts: Sequence[Sequence[int]], max_tokens: int, vllm: bool
) -> dict:
    """Greedy continuations (to vLLM with ``repetition_penalty`` 1: it would apply the model's
    own generation config otherwise; others may refuse the field)."""
    extra = {"repetition_penalty": 1.0} if vllm else {}
    return {
        "model": model,
        "prompt": [list(p) for p in prompts],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        **extra,
    }
