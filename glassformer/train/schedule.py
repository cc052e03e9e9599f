"""Learning-rate schedules: nanoGPT's warmup + cosine (the default), and the Transformer paper's
warmup + inverse square root (`--schedule inverse-sqrt`).

Cosine: linear warmup, then cosine decay to `min_lr`, then constant.

Exactly nanoGPT's `get_lr(it)` (train.py), iteration `it` counted from 0:

    it <  warmup_iters:                  lr * (it + 1) / (warmup_iters + 1)
    it >  lr_decay_iters:                min_lr
    otherwise, r = (it - warmup_iters) / (lr_decay_iters - warmup_iters) in [0, 1]:
                                         min_lr + 0.5 * (1 + cos(pi * r)) * (lr - min_lr)

note: the warmup never reaches lr (at it = warmup_iters - 1 it gives lr * w / (w + 1)); the cosine
part starts at exactly lr at it = warmup_iters and ends at exactly min_lr at it = lr_decay_iters.

Inverse square root ("Attention Is All You Need" §5.3), with step = it + 1 counted from 1:

    paper:  d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    here:   lr * min(step / warmup, sqrt(warmup / step))

The same curve with its peak named: it rises linearly to exactly `lr` at step = warmup_iters, then
falls as 1/sqrt(step) with no end (min_lr and lr_decay_iters are not used). The paper's own peak
is d_model^-0.5 * warmup^-0.5 (7e-4 for its base model: 512 wide, 4,000 warmup steps).
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


SCHEDULES = ("cosine", "inverse-sqrt")   # the names --schedule takes


def inverse_sqrt_lr_at(it: int, *, lr: float, warmup_iters: int) -> float:
    """The paper's warmup then 1/sqrt(step) decay, peaking at exactly `lr` (module docstring).

    >>> inverse_sqrt_lr_at(99, lr=1e-3, warmup_iters=100)
    0.001
    >>> inverse_sqrt_lr_at(399, lr=1e-3, warmup_iters=100)
    0.0005
    """
    if it < 0:
        raise GlassformerError(f"expected iteration it >= 0, got {it}")
    if warmup_iters < 1:
        raise GlassformerError(f"the inverse-sqrt schedule needs warmup_iters >= 1, got "
                               f"{warmup_iters}")
    step = it + 1
    return lr * min(step / warmup_iters, math.sqrt(warmup_iters / step))


def scheduled_lr(schedule: str, it: int, *, lr: float, min_lr: float, warmup_iters: int,
                 lr_decay_iters: int) -> float:
    """The learning rate of iteration `it` under the schedule named `schedule` (SCHEDULES)."""
    if schedule == "inverse-sqrt":
        return inverse_sqrt_lr_at(it, lr=lr, warmup_iters=warmup_iters)
    if schedule == "cosine":
        return lr_at(it, lr=lr, min_lr=min_lr, warmup_iters=warmup_iters,
                     lr_decay_iters=lr_decay_iters)
    raise GlassformerError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
