"""Requests to a chat API (``/v1/chat/completions``) and what scd reads from its answers: the
reply text (generate mode), or the first reply token's top log-probabilities (choice mode).

A chat API takes the conversation as text and tokenizes it with the served model's own template,
so scd cannot choose the scored tokens: an option is found where a top token, stripped of
spaces, is the option's text -- several such tokens ("Yes", " Yes") pool their probability --
and is ``None`` (not found) when none of the top ``k`` is. When an option is missing and the
most likely token is no option either (the first piece of a multi-token option, "Un" of
"Unlikely"), every option is ``None``: the found one would win by default. That measures
one-word options only, and only as far as the top ``k`` reach (hosted APIs give at most 20);
multi-token options and prompt log-probabilities are out of reach. Each record says which
options were found.
"""

from __future__ import annotations

import math
from typing import Any

from scd.eval.engines.client import Malformed

__all__ = ["TOP_LOGPROBS", "chat_body", "option_logprobs", "reply_text"]

TOP_LOGPROBS = 20  # the most the OpenAI API gives (top_logprobs: 0..20)


def chat_body(
    model: str,
    messages: tuple[tuple[str, str], ...],
    max_tokens: int,
    top_logprobs: int | None = None,
) -> dict[str, Any]:
    """A greedy chat completion of ``messages`` ((role, content) pairs)."""
    turns = [{"role": role, "content": content} for role, content in messages]
    body: dict[str, Any] = {
        "model": model,
        "messages": turns,
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    if top_logprobs:
        body.update(logprobs=True, top_logprobs=top_logprobs)
    return body


def reply_text(answer: Any) -> str:
    """The reply of a chat completion, stripped."""
    content = answer["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise Malformed("no reply text")
    return content.strip()


def option_logprobs(answer: Any, options: tuple[str, ...]) -> list[float | None]:
    """Each option's log-probability as the first reply token (None: not among the top)."""
    top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    if not isinstance(top, list) or not top:
        raise Malformed("no top log-probs")
    found: list[float | None] = []
    for option in options:
        hits = [float(t["logprob"]) for t in top if str(t["token"]).strip() == option]
        peak = max(hits, default=0.0)
        found.append(peak + math.log(sum(math.exp(h - peak) for h in hits)) if hits else None)
    first = str(max(top, key=lambda t: float(t["logprob"]))["token"]).strip()
    if None in found and first not in options:  # e.g. "Un" of "Unlikely" on top: no answer
        return [None] * len(options)
    return found
