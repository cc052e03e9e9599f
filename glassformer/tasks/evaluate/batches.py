"""Which items share a forward: groups of requests (an item's options) planned into batches for
score_batch (score.py).

    plan_batches(groups)   -> [[3, 0, 7], [1, 5], ...]   indices of `groups`, each list a batch

A batch costs two forwards (score.py): its G items' prefixes right-padded to the longest, P,
then its N requests' rests right-padded to the longest, R. In positions the model runs:

    cost(batch) = G * P + N * R + FORWARD per forward

FORWARD is what a forward costs beyond its positions (the weights read once, BLAS's small-matrix
inefficiency; SmolLM2-135M, one thread: ~2 ms a position in a long forward, 80-120 ms more a
forward). Padding is paid at the full rate, so items of a batch should have prefixes of one
length and rests of one length: the 0-shot tasks (copa, winogrande: prefixes of 4-35 tokens,
rests of 3-12) ran 1.35-1.9x their real positions when items were taken shortest first by their
longest input alone.

Items with the very same prefix (winograd's pairs, which differ in their continuation only)
share one row of the first forward, so G counts distinct prefixes.

The plan: items sorted by (rest, prefix) and by (prefix, rest), like prefixes side by side
(the tokens break ties); for each order the cheapest cut into consecutive batches (dynamic
programming over where each batch ends, O(items x rows)); the cheaper of the two plans. A
batch also stays within `rows` requests and `positions` cache positions (its rows times its
longest input: the KV cache the second forward holds, about 46 KB a position for SmolLM2-135M);
an item larger than the limits is a batch of its own. Every index appears once; the caller puts
the answers back in order.
"""
from __future__ import annotations

from glassformer.tasks.evaluate.encode import Encoded
from glassformer.tasks.evaluate.score import item_prefix

ROWS = 128           # requests in one forward
POSITIONS = 8192     # rows x longest input in one forward (~375 MB of cache for SmolLM2-135M)
FORWARD = 128        # a forward's fixed cost, in positions (64 and 128 measured best)


def _cut(order: list[int], shapes: list[tuple], rows: int,
         positions: int) -> tuple[float, list[list[int]]]:
    """The cheapest cut of `order` into consecutive batches: (its cost, the batches).
    shapes[i] = (prefix, rest, requests, longest input, prefix tokens) of item i."""
    n = len(order)
    best, start = [0.0] + [float("inf")] * n, [0] * (n + 1)   # best[j]: order[:j] planned
    for end in range(1, n + 1):
        prefix = rest = used = longest = 0
        heads = set()                                  # distinct prefixes: a row each
        for first in range(end - 1, -1, -1):           # the batch order[first:end]
            p, r, size, length, tokens = shapes[order[first]]
            prefix, rest, used = max(prefix, p), max(rest, r), used + size
            longest = max(longest, length)
            heads.add(tokens)
            if first < end - 1 and (used > rows or used * longest > positions):
                break
            cost = best[first] + len(heads) * prefix + used * rest + FORWARD * (1 + (prefix > 0))
            if cost < best[end]:
                best[end], start[end] = cost, first
    batches, end = [], n
    while end:
        batches.append(order[start[end]:end])
        end = start[end]
    return best[n], batches[::-1]


def plan_batches(groups: list[list[Encoded]], rows: int = ROWS,
                 positions: int = POSITIONS) -> list[list[int]]:
    """Indices of `groups` in batches of like prefixes and like rests, within the limits.

    >>> import numpy as np
    >>> from glassformer.tasks.evaluate.encode import Encoded
    >>> item = lambda n: [Encoded(np.zeros(n, np.int64), np.zeros(1, np.int64), False)] * 2
    >>> plan_batches([item(9), item(2), item(5), item(3)], rows=4)
    [[1, 3], [2, 0]]
    """
    shapes = []
    for group in groups:
        prefix = item_prefix(group)
        longest = max(len(r.inputs) for r in group)
        shapes.append((prefix, longest - prefix, len(group), longest,
                       group[0].inputs[:prefix].tobytes()))
    plans = [_cut(sorted(range(len(groups)), key=lambda i, k=key: k(shapes[i])), shapes, rows,
                  positions)
             for key in (lambda s: (s[1], s[0], s[4]), lambda s: (s[0], s[4], s[1]))]
    return min(plans, key=lambda plan: plan[0])[1]
