"""Which records make a batch: seeded shuffled epochs for training, the split in order for evals.

A record dataset (chat conversations, preference pairs, prompts, source/target pairs) is read
as TRL and transformers' Trainer read theirs: in epochs, each a fresh seeded permutation of the
train split, every record once per epoch.

    position of micro-batch k    k * B              (k counts every micro-batch of the run)
    its records                  positions [k B, (k + 1) B) of the endless sequence
                                 order_0 ++ order_1 ++ ...   (order_e: epoch e's permutation)
    epoch e's permutation        np.random.default_rng([seed, EPOCH_STREAM, e]).permutation(n)
                                 (raw_order)

A batch that crosses an epoch's end takes the rest from the next epoch's permutation, whose
records that batch already holds wait until just after it (epoch_order): so no batch of B <= n
records holds one twice, and a batch of 8 from 7 pairs holds each pair once and one twice,
while every epoch still holds every record once. Nothing is saved between draws: the batch of
micro-batch k is a function of (seed, n, B, k) alone, so a run resumed at any iteration draws
exactly the batches of the uninterrupted one (the loop passes k = iteration * grad_accum + j).
Draws with replacement would not: a DPO batch of 8 from 7 pairs drew one pair three times and
missed two, and no step could be compared with a TRL run.

Length grouping (`group`, source/target pairs): each epoch's permutation is cut into
"megabatches" of `group` records, and each is sorted by row index; the seq2seq rows are sorted
by length (datasets/pairs.py), so the B records of a batch have about the same length and little
of it is padding. That is transformers' LengthGroupedSampler (group_by_length, megabatches of
50 B), with ascending order.

Evaluation reads a split in order, the same records every eval: batch i is records
[i B, (i + 1) B), wrapping at the end (in_order_rows). A length-grouped split is sorted by
length, so its "order" is one fixed length-grouped permutation (EVAL_STREAM) instead: read from
the start, the split itself would give the eval only its shortest pairs.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError

EPOCH_STREAM = 0xE90C   # the epochs' own stream of the run's seed (apart from init and dropout)
EVAL_STREAM = 0xE9A1    # the fixed order a length-grouped split is evaluated in
MEGABATCHES = 50        # length grouping: B * 50 records a megabatch (transformers' default)


def raw_order(n: int, seed: int, epoch: int, group: int = 0,
              stream: int = EPOCH_STREAM) -> np.ndarray:
    """Epoch `epoch`'s seeded permutation of n records (n,); group > 0: sorted within each run
    of `group` records (length grouping, see the module docstring)."""
    order = np.random.default_rng([seed, stream, epoch]).permutation(n)   # (n,)
    if group > 0:
        order = np.concatenate([np.sort(order[start:start + group])
                                for start in range(0, n, group)])
    return order


def after_crossing(order: np.ndarray, held: np.ndarray, head: int) -> np.ndarray:
    """`order` with its first `head` records not in `held` first: the records the crossing
    batch already holds (from the epoch before) come just after its part of this epoch."""
    free = order[~np.isin(order, held)][:head]                            # (<= head,)
    return np.concatenate([free, order[~np.isin(order, free)]])          # (n,)


def epoch_order(n: int, batch_size: int, seed: int, epoch: int, group: int = 0) -> np.ndarray:
    """The order epoch `epoch` is read in (n,): its raw_order, but for the batch that crosses
    into it from the epoch before (after_crossing).

    Each epoch depends only on the tail of the one before. That tail is the raw order's when
    n >= 2B - 1 (after_crossing moves records from the first B positions only); for a smaller
    split the orders are built from the last epoch that starts a batch (at most B epochs back,
    each of fewer than 2B records)."""
    first = epoch
    if n < 2 * batch_size - 1:
        while first > 0 and first * n % batch_size:
            first -= 1
    elif epoch * n % batch_size:
        first = epoch - 1
    order = raw_order(n, seed, first, group)
    for e in range(first + 1, epoch + 1):
        before = e * n % batch_size           # positions of the crossing batch in epoch e - 1
        tail = order[n - min(before, n):]
        order = raw_order(n, seed, e, group)
        if before:
            order = after_crossing(order, tail, batch_size - before)
    return order


def shuffled_rows(n: int, batch_size: int, seed: int, step: int, group: int = 0) -> np.ndarray:
    """The records (B,) of micro-batch `step`: positions [step B, (step + 1) B) of the epochs'
    orders laid end to end."""
    if n < 1:
        raise GlassformerError("a split with no records has no batches")
    positions = step * batch_size + np.arange(batch_size, dtype=np.int64)    # (B,)
    epochs, within = np.divmod(positions, n)                                 # (B,), (B,)
    rows = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):   # one or two (more only when B > n)
        here = epochs == epoch
        rows[here] = epoch_order(n, batch_size, seed, int(epoch), group)[within[here]]
    return rows


def in_order_rows(n: int, batch_size: int, index: int) -> np.ndarray:
    """Eval batch `index`'s records (B,): [index B, (index + 1) B) of the split, wrapping."""
    if n < 1:
        raise GlassformerError("a split with no records has no batches")
    return (index * batch_size + np.arange(batch_size, dtype=np.int64)) % n


def batch_rows(n: int, train_cfg, *, step: int, shuffle: bool, group: int = 0) -> np.ndarray:
    """The records (B,) a draw takes: a training micro-batch's (shuffle) or an eval batch's."""
    if shuffle:
        return shuffled_rows(n, train_cfg.batch_size, train_cfg.seed, step, group)
    rows = in_order_rows(n, train_cfg.batch_size, step)
    if group > 0:   # a length-sorted split: in a fixed length-grouped order (EVAL_STREAM)
        rows = raw_order(n, train_cfg.seed, 0, group, EVAL_STREAM)[rows]
    return rows
