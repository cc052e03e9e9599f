"""Scoring items' requests: each item's shared beginning runs once, each option continues from
the KV cache, and several items share each forward.

    prefix     the longest run of tokens every request of an item begins with (the few-shot
               examples and the query of a multiple-choice item; the examples and the common
               start of the context options of a schema item), cut so that it stops before any
               request's first scored position
    1. forward(every item's prefix, right-padded) into a cache, one row an item   (G, P)
    2. the cache repeated to one row per request (KVCache.select_rows)            (N rows)
    3. forward(rest of each request's inputs, right-padded) from its item's prefix (N, R)
    4. log_softmax at the scored positions; a request's log-likelihood is the sum over its
       continuation's tokens, and it is greedy when every one is the argmax

Right padding after a row's real tokens needs no mask: a causal model's real positions never see
the padding after them. The padding between a shorter prefix and the longest one is in the
cache, before the rest: those keys are masked and the rest's positions count from the row's own
prefix. The result equals running each request's whole sequence from scratch (tests: 1e-5).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.tasks.evaluate.encode import Encoded


class Scored(NamedTuple):
    logps: list[list[float]]   # per request, each continuation token's log-probability
    greedy: list[bool]         # per request: every continuation token is the argmax
    tokens: int                # positions the model ran (prefix once, then every row's rest;
                               # 0 for the prefix when an earlier item of its batch ran it)


def shared_prefix(requests: list[Encoded]) -> int:
    """How many leading inputs every request shares, stopping before the first scored one."""
    limit = min(len(r.inputs) - len(r.targets) for r in requests)
    first = requests[0].inputs
    length = 0
    while length < limit and all(r.inputs[length] == first[length] for r in requests[1:]):
        length += 1
    return length


def item_prefix(requests: list[Encoded]) -> int:
    """The prefix an item runs once: shared, and short of its longest input (every row of the
    second forward reads at least one position)."""
    return min(shared_prefix(requests), max(len(r.inputs) for r in requests) - 1)


def target_scores(logits: np.ndarray, targets: np.ndarray, rows: int = 64):
    """Each row's log-probability of its target and whether the target is the row's argmax:
    logits (M, V), targets (M,) -> (logp (M,) float64, hits (M,) bool).

    log p(t) = z_t - logsumexp(z), a block of `rows` rows at a time: exp in the logits' own
    float32 (each term to 1e-7), the sum, the log and the difference in float64. Not
    log_softmax_forward: that op writes the whole (M, V) table and its probabilities for a
    backward (four float64 passes over M x 49,152 numbers for SmolLM2), where a scorer needs
    one number a row; it was a third of a 0-shot task's time.

    >>> logp, hits = target_scores(np.log(np.array([[0.25, 0.75]], np.float32)), np.array([1]))
    >>> round(float(np.exp(logp[0])), 6), hits.tolist()
    (0.75, [True])
    """
    logp = np.empty(len(targets), np.float64)
    hits = np.empty(len(targets), bool)
    for start in range(0, len(targets), rows):
        block = logits[start:start + rows]                                          # (r, V)
        top = block.max(axis=-1, keepdims=True)                                     # (r, 1)
        total = np.exp(block - top).sum(axis=-1, dtype=np.float64)                  # (r,)
        lse = top[:, 0].astype(np.float64) + np.log(total)                          # (r,)
        mine = targets[start:start + rows]
        logp[start:start + rows] = block[np.arange(len(mine)), mine].astype(np.float64) - lse
        hits[start:start + rows] = block.argmax(axis=-1) == mine
    return logp, hits


def score_batch(model, groups: list[list[Encoded]]) -> list[Scored]:
    """Several items' requests (one group an item) in two forwards, each item's prefix once.

        1. every distinct prefix, right-padded, in one forward into a cache, a row each (G, P)
           (last_only: the prefix's logits are never read; items with the very same prefix,
           winograd's pairs that differ in their continuation only, share one row)
        2. the cache rows repeated, one per request, from its item's row             (N rows)
        3. every request's rest, right-padded, in one forward                         (N, R)
           row n at positions p_n, p_n + 1, ... (p_n its item's prefix) with the keys
           [p_n, P) masked: they hold another item's longer prefix's padding
        4. the LM head and log_softmax at each request's scored positions only
           (family.forward's head_rows: no logits for padding or unscored rest tokens)

    With one item (or prefixes of one length) there is nothing to mask: positions and mask
    are left to the model's defaults. Equal to scoring each item alone (tests: within 1e-5).
    """
    prefixes = [item_prefix(group) for group in groups]
    longest_prefix = max(prefixes)
    rows_of = {}                          # a prefix's tokens -> its row in the first forward
    slots = [rows_of.setdefault(group[0].inputs[:p].tobytes(), len(rows_of))
             for group, p in zip(groups, prefixes)]                                    # (G items)
    first = {slot: g for g, slot in reversed(list(enumerate(slots)))}   # the item each row runs
    owners = np.asarray([g for g, group in enumerate(groups) for _ in group], np.int64)  # (N,)
    flat = [request for group in groups for request in group]
    starts = [prefixes[g] for g in owners]                                            # p_n
    width = max(len(r.inputs) - p for r, p in zip(flat, starts))                       # R
    cache = model.new_cache(len(rows_of), max_len=longest_prefix + width)
    if longest_prefix:
        head = np.zeros((len(rows_of), longest_prefix), np.int64)                       # (G, P)
        for slot, g in first.items():
            head[slot, :prefixes[g]] = groups[g][0].inputs[:prefixes[g]]
        model.forward(head, kv_cache=cache, last_only=True)
        cache.advance(longest_prefix)
    cache = cache.select_rows(np.asarray(slots, np.int64)[owners])
    rest = np.zeros((len(flat), width), np.int64)                                       # (N, R)
    for row, (request, start) in enumerate(zip(flat, starts)):
        rest[row, :len(request.inputs) - start] = request.inputs[start:]
    ragged = {}
    if min(prefixes) < longest_prefix:
        keys = np.ones((len(flat), longest_prefix + width), bool)                    # (N, P + R)
        for row, start in enumerate(starts):
            keys[row, start:longest_prefix] = False
        positions = np.asarray(starts, np.int64)[:, None] + np.arange(width)           # (N, R)
        positions = np.minimum(positions, model.context_len - 1)   # padding: any valid place
        ragged = {"key_mask": keys, "positions": positions}
    rows, cols = [], []                  # the scored positions: the head runs on those alone
    for row, (request, start) in enumerate(zip(flat, starts)):
        n, end = len(request.targets), len(request.inputs) - start
        rows += [row] * n
        cols += range(end - n, end)
    logits, _ = model.family.forward(model.params, rest, model.cfg, kv_cache=cache,
                                     head_rows=(np.asarray(rows), np.asarray(cols)),
                                     **ragged)                                   # (sum n, V)
    targets = np.concatenate([request.targets for request in flat])                 # (sum n,)
    picked, hits = target_scores(logits, targets)        # row k: the k-th target of `flat`
    scored, at = [], 0
    for g, (group, prefix) in enumerate(zip(groups, prefixes)):
        logps, greedy = [], []
        for request in group:
            n = len(request.targets)
            logps.append(picked[at:at + n].tolist())
            greedy.append(bool(np.all(hits[at:at + n])))
            at += n
        ran = prefix if first[slots[g]] == g else 0       # a shared prefix counted once
        scored.append(Scored(logps, greedy, ran + sum(len(r.inputs) - prefix for r in group)))
    return scored


def score_requests(model, requests: list[Encoded]) -> Scored:
    """Each request's per-token log-likelihoods and greediness, the prefix computed once."""
    return score_batch(model, [requests])[0]
