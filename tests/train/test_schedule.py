"""lr_at against nanoGPT's get_lr, written out here as the reference."""
import math

import pytest

from glassformer.errors import GlassformerError
from glassformer.train.schedule import lr_at

RECIPE = dict(lr=1e-3, min_lr=1e-4, warmup_iters=100, lr_decay_iters=2000)  # shakespeare_char CPU


def nanogpt_get_lr(it, lr, min_lr, warmup_iters, lr_decay_iters):
    """nanoGPT train.py get_lr, transcribed."""
    if it < warmup_iters:
        return lr * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (lr - min_lr)


@pytest.mark.parametrize("it", [0, 1, 50, 99, 100, 101, 1050, 1999, 2000, 2001, 5000])
def test_matches_nanogpt_at_key_iterations(it):
    assert lr_at(it, **RECIPE) == nanogpt_get_lr(it, **RECIPE)


def test_shape_of_the_schedule():
    assert lr_at(0, **RECIPE) == pytest.approx(1e-3 / 101)
    assert lr_at(100, **RECIPE) == 1e-3            # cosine starts at the peak
    assert lr_at(2000, **RECIPE) == pytest.approx(1e-4)
    assert lr_at(1050, **RECIPE) == pytest.approx(0.5 * (1e-3 + 1e-4))  # halfway: the mean
    lrs = [lr_at(it, **RECIPE) for it in range(100, 2001)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_no_warmup():
    assert lr_at(0, lr=1.0, min_lr=0.0, warmup_iters=0, lr_decay_iters=10) == 1.0


def test_bad_settings_raise():
    with pytest.raises(GlassformerError, match="lr_decay_iters > warmup_iters"):
        lr_at(0, lr=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=10)
    with pytest.raises(GlassformerError, match="it >= 0"):
        lr_at(-1, **RECIPE)
