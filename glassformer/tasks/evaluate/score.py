"""Scoring one item's requests: their shared beginning runs once, each option continues from the
KV cache.

    prefix     the longest run of tokens every request's inputs begin with (the few-shot
               examples and the query of a multiple-choice item; the examples and the common
               start of the context options of a schema item), cut so that it stops before any
               request's first scored position
    1. forward(prefix) into a one-row cache                                   (1, P)
    2. the cache repeated to one row per request (KVCache.select_rows)        (N rows)
    3. forward(rest of each request's inputs, right-padded) from position P   (N, R)
    4. log_softmax at the scored positions; a request's log-likelihood is the sum over its
       continuation's tokens, and it is greedy when every one is the argmax

Right padding needs no mask: a causal model's real positions never see the padding after them.
The result equals running each request's whole sequence from scratch (tests: within 1e-5).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.tasks.evaluate.encode import Encoded


class Scored(NamedTuple):
    logps: list[list[float]]   # per request, each continuation token's log-probability
    greedy: list[bool]         # per request: every continuation token is the argmax
    tokens: int                # positions the model ran (prefix once, then every row's rest)


def shared_prefix(requests: list[Encoded]) -> int:
    """How many leading inputs every request shares, stopping before the first scored one."""
    limit = min(len(r.inputs) - len(r.targets) for r in requests)
    first = requests[0].inputs
    length = 0
    while length < limit and all(r.inputs[length] == first[length] for r in requests[1:]):
        length += 1
    return length


def score_requests(model, requests: list[Encoded]) -> Scored:
    """Each request's per-token log-likelihoods and greediness, the prefix computed once."""
    rows = len(requests)
    longest = max(len(r.inputs) for r in requests)
    prefix = min(shared_prefix(requests), longest - 1)   # every forward reads a position
    cache = model.new_cache(1, max_len=max(longest, 1))
    if prefix:
        model.forward(requests[0].inputs[None, :prefix], kv_cache=cache)   # (1, P)
        cache.advance(prefix)
    cache = cache.select_rows(np.zeros(rows, np.int64))
    rest = np.zeros((rows, longest - prefix), np.int64)                    # (N, R), right-padded
    for row, request in enumerate(requests):
        rest[row, :len(request.inputs) - prefix] = request.inputs[prefix:]
    logits, _ = model.forward(rest, kv_cache=cache)                        # (N, R, V)
    logps, greedy = [], []
    for row, request in enumerate(requests):
        n = len(request.targets)
        end = len(request.inputs) - prefix
        scores, _ = log_softmax_forward(logits[row, end - n:end].astype(np.float64))  # (n, V)
        logps.append(scores[np.arange(n), request.targets].tolist())
        greedy.append(bool(np.all(scores.argmax(-1) == request.targets)))
    return Scored(logps, greedy, prefix + sum(len(r.inputs) - prefix for r in requests))
