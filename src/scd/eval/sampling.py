"""Stratified, seeded subsets (``--limit``) that keep every stratum level in proportion.

Units (prompt sets, BBQ items) carry a tuple of stratum values, outermost level first (e.g.
principle, scenario, action, scale, axis). The wanted number of units is split level by level:
a node's units go to its children in proportion to their sizes, and the rounding remainder is not
settled per node but carried per level *across* nodes (a child value that was rounded down in one
node is first in line in the next), with ties broken in a seeded order. So every level's marginal
stays within about one unit of its proportional share for any subset size, even when there are
far more strata than units wanted (1,440 strata and 200 prompt sets for ``--limit 600``) --
where a per-stratum largest-remainder allocation floors every quota to zero and hands the whole
subset to the first strata in sorted order. Within a leaf stratum, units are drawn at random.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["stratified_sample"]


def stratified_sample(keys: Sequence[tuple[Hashable, ...]], want: int, seed: int) -> list[int]:
    """Indices (sorted) of ``min(want, len(keys))`` units chosen as the module docstring says.

    Args:
        keys: per unit, its stratum value at each level (all tuples of the same length).
        want: how many units to choose.
        seed: seeds the tie-breaks and the draws within strata; another seed, another subset.
    """
    want = min(want, len(keys))
    if want <= 0:
        return []
    depth = len(keys[0])
    tree: dict[Any, Any] = {}
    for i, key in enumerate(keys):
        node = tree
        for value in key[:-1]:
            node = node.setdefault(value, {})
        node.setdefault(key[-1], []).append(i)
    rng = np.random.default_rng(seed)
    levels = [sorted(set(values), key=repr) for values in zip(*keys)]  # each level's values
    ranks = [dict(zip(values, rng.permutation(len(values)).tolist())) for values in levels]
    deficits: list[dict[Any, float]] = [{} for _ in range(depth)]
    chosen: list[int] = []

    def size(node: Any) -> int:
        return len(node) if isinstance(node, list) else sum(size(c) for c in node.values())

    def visit(node: Any, n: int, level: int) -> None:
        if isinstance(node, list):
            chosen.extend(node[j] for j in rng.choice(len(node), size=n, replace=False))
            return
        children = sorted(node, key=repr)
        sizes = {c: size(node[c]) for c in children}
        total = sum(sizes.values())
        debt = deficits[level]
        for c in children:
            debt[c] = debt.get(c, 0.0) + n * sizes[c] / total
        alloc = {c: min(sizes[c], max(0, math.floor(debt[c] + 1e-9))) for c in children}
        rest = n - sum(alloc.values())
        order = lambda c: (-(debt[c] - alloc[c]), ranks[level][c])  # noqa: E731
        for _ in range(rest):  # one more each for those owed most
            alloc[min((c for c in children if alloc[c] < sizes[c]), key=order)] += 1
        for _ in range(-rest):  # one fewer each for those owed least
            alloc[max((c for c in children if alloc[c] > 0), key=order)] -= 1
        for c in children:
            debt[c] -= alloc[c]
            if alloc[c]:
                visit(node[c], alloc[c], level + 1)

    visit(tree, want, 0)
    return sorted(chosen)
