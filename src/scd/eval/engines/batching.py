"""The order the hf engine batches prompts in, and the head a batch's prompts share.

Without the prefix cache prompts go longest first (the least padding). With it, a batch's shared
head runs once and only each prompt's rest is computed, so an order is worth what it leaves to
compute: per batch, its rows times its longest prompt less the head they share (when at least
the engine's minimum). Two orders are weighed that way: by token ids (prompts with the same head
-- a chat template's system text, a BBQ context -- together) and by length, and the cheaper one
is taken; token-id order alone costs padding where prompts share little (a short system text),
so that turning the cache on never gives more to compute than leaving it off.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["batch_order", "length_order", "shared_head"]


def shared_head(prompts: Sequence[Sequence[int]], rest: int, minimum: int) -> int:
    """How many leading tokens all ``prompts`` share, leaving at least ``rest`` tokens of each
    after them; 0 when that is under ``minimum`` tokens or there are fewer than two prompts."""
    if len(prompts) < 2:
        return 0
    first, last = min(prompts), max(prompts)  # whatever these two share, all share
    shared = next(
        (i for i, (a, b) in enumerate(zip(first, last)) if a != b), min(len(first), len(last))
    )
    shared = min(shared, min(len(p) for p in prompts) - rest)
    return shared if shared >= minimum else 0


def length_order(prompts: Sequence[Sequence[int]]) -> list[int]:
    """Longest first."""
    return sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))


def _work(prompts: Sequence[Sequence[int]], order: list[int], size: int, minimum: int) -> int:
    """The tokens left to compute in batches of ``size`` taken in ``order``, heads run once."""
    total = 0
    for start in range(0, len(order), size):
        batch = [prompts[i] for i in order[start : start + size]]
        longest = max(len(p) for p in batch)
        total += len(batch) * (longest - shared_head(batch, 1, minimum))
    return total


def batch_order(prompts: Sequence[Sequence[int]], size: int, minimum: int) -> list[int]:
    """With the prefix cache: token-id order or length order, whichever leaves fewer tokens to
    compute in batches of ``size`` (heads of at least ``minimum`` tokens run once; token-id
    order on a tie)."""
    by_ids = sorted(range(len(prompts)), key=lambda i: prompts[i])
    by_length = length_order(prompts)
    costs = [_work(prompts, o, size, minimum) for o in (by_ids, by_length)]
    return by_ids if costs[0] <= costs[1] else by_length
