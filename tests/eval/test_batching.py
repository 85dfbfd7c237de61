"""The hf engine's batch order with the prefix cache: token-id order where the heads it groups
save more than its padding costs, else length order -- never more to compute than without the
cache (``scd.eval.engines.batching``)."""

from __future__ import annotations

import random

from scd.eval.engines.batching import _work, batch_order, length_order, shared_head


def test_the_shared_head_is_what_every_prompt_holds_and_leaves_the_rest() -> None:
    assert shared_head([[1, 2, 3, 4], [1, 2, 3, 9, 9]], rest=1, minimum=2) == 3
    assert shared_head([[1, 2, 3], [1, 2, 3, 4]], rest=1, minimum=2) == 2  # one token of each left
    assert shared_head([[1, 2, 3, 4], [1, 2, 3, 9]], rest=1, minimum=4) == 0  # under the minimum
    assert shared_head([[1, 2, 3]], rest=1, minimum=1) == 0  # a lone prompt shares nothing


def test_a_short_common_head_keeps_length_order() -> None:
    """A 5-token system text (Llama 3.1's chat template under scd's protocol) and prompts of
    different lengths: token-id order would mix lengths in a batch and cache nothing."""
    rng = random.Random(0)
    prompts = [
        [1, 2, 3, 4, 5] + [rng.randrange(6, 99) for _ in range(rng.randrange(20, 60))]
        for _ in range(96)
    ]
    order = batch_order(prompts, 32, minimum=16)
    assert order == length_order(prompts)


def test_groups_with_long_heads_go_by_token_ids() -> None:
    """Four BBQ-like contexts of 80 tokens, each with questions of two lengths, shuffled: by
    token ids each batch is one context and its head runs once."""
    rng = random.Random(1)
    contexts = [[c * 1000 + i for i in range(80)] for c in range(1, 5)]
    prompts = [
        ctx + [rng.randrange(10, 99) for _ in range(n)]
        for ctx in contexts
        for n in [5] * 4 + [30] * 4
    ]
    rng.shuffle(prompts)
    order = batch_order(prompts, 8, minimum=16)
    assert order == sorted(range(len(prompts)), key=lambda i: prompts[i])
    assert _work(prompts, order, 8, 16) < _work(prompts, length_order(prompts), 8, 16)


def test_the_order_taken_never_leaves_more_than_length_order() -> None:
    rng = random.Random(2)
    for _ in range(200):
        heads = [[rng.randrange(1, 5) for _ in range(rng.randrange(0, 40))] for _ in range(3)]
        prompts = [
            rng.choice(heads) + [rng.randrange(5, 50) for _ in range(rng.randrange(1, 40))]
            for _ in range(rng.randrange(2, 50))
        ]
        size = rng.randrange(1, 16)
        chosen = _work(prompts, batch_order(prompts, size, 8), size, 8)
        assert chosen <= _work(prompts, length_order(prompts), size, 8)
        assert sorted(batch_order(prompts, size, 8)) == list(range(len(prompts)))
