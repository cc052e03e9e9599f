"""Which items share a forward: groups of requests (an item's options) planned into batches for
score_batch (score.py).

    plan_batches(groups)   -> [[3, 0, 7], [1, 5], ...]   indices of `groups`, each list a batch

Items are taken shortest first (by their longest input), so that the items of one batch have
prefixes of similar length and little padding; a batch closes before it would pass `rows`
requests or `positions` cache positions (its rows times its longest input: the KV cache the
second forward holds, about 46 KB a position for SmolLM2-135M). An item larger than the limits
is a batch of its own. Every index appears once; the caller puts the answers back in order.
"""
from __future__ import annotations

from glassformer.tasks.evaluate.encode import Encoded

ROWS = 32            # requests in one forward
POSITIONS = 8192     # rows x longest input in one forward (~375 MB of cache for SmolLM2-135M)


def plan_batches(groups: list[list[Encoded]], rows: int = ROWS,
                 positions: int = POSITIONS) -> list[list[int]]:
    """Indices of `groups` in batches of similar length within the limits.

    >>> import numpy as np
    >>> from glassformer.tasks.evaluate.encode import Encoded
    >>> item = lambda n: [Encoded(np.zeros(n, np.int64), np.zeros(1, np.int64), False)] * 2
    >>> plan_batches([item(9), item(2), item(5), item(3)], rows=4)
    [[1, 3], [2, 0]]
    """
    longest = [max(len(request.inputs) for request in group) for group in groups]
    batches, current, used = [], [], 0
    for index in sorted(range(len(groups)), key=longest.__getitem__):
        size = len(groups[index])
        if current and (used + size > rows or (used + size) * longest[index] > positions):
            batches.append(current)
            current, used = [], 0
        current.append(index)
        used += size
    return batches + [current] if current else batches
