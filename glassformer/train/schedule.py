"""Learning-rate schedule: linear warmup, then cosine decay to `min_lr`, then constant.

Exactly nanoGPT's `get_lr(it)` (train.py), iteration `it` counted from 0:

    it <  warmup_iters:                  lr * (it + 1) / (warmup_iters + 1)
    it >  lr_decay_iters:                min_lr
    otherwise, r = (it - warmup_iters) / (lr_decay_iters - warmup_iters) in [0, 1]:
                                         min_lr + 0.5 * (1 + cos(pi * r)) * (lr - min_lr)

note: the warmup never reaches lr (at it = warmup_iters - 1 it gives lr * w / (w + 1)); the cosine
part starts at exactly lr at it = warmup_iters and ends at exactly min_lr at it = lr_decay_iters.
"""
from __future__ import annotations

import math

from glassformer.errors import GlassformerError


def lr_at(it: int, *, lr: float, min_lr: float, warmup_iters: int, lr_decay_iters: int) -> float:
    """The learning rate for iteration `it` (a Python float).

    >>> lr_at(0, lr=1e-3, min_lr=1e-4, warmup_iters=9, lr_decay_iters=100)
    0.0001
    >>> lr_at(5000, lr=1e-3, min_lr=1e-4, warmup_iters=9, lr_decay_iters=100)
    0.0001
    """
    if it < 0:
        raise GlassformerError(f"expected iteration it >= 0, got {it}")
    if warmup_iters < 0:
        raise GlassformerError(f"expected warmup_iters >= 0, got {warmup_iters}")
    if lr_decay_iters <= warmup_iters:
        raise GlassformerError(
            f"expected lr_decay_iters > warmup_iters, got lr_decay_iters={lr_decay_iters} and "
            f"warmup_iters={warmup_iters}")
    if it < warmup_iters:
        return lr * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 at the start of decay, 0 at its end
    return min_lr + coeff * (lr - min_lr)
