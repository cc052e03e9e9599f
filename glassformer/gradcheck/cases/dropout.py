"""Gradcheck cases for dropout: training (p = 0.5 and p = 0.1), p = 0, and eval mode.

Finite differences call the forward many times, so every call must draw the same mask: each
forward builds a fresh generator from one fixed seed.
"""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.dropout import dropout_backward, dropout_forward

_MASK_SEED = 1234  # fixed so that every forward call in one check drops the same elements


def _case(mode, *, p, train):
    def make(rng):
        return {"x": rng.standard_normal((2, 3, 4))}

    def forward(inp):
        rng = np.random.default_rng(_MASK_SEED) if train else None
        return dropout_forward(inp["x"], p=p, rng=rng, train=train)

    def backward(dout, ctx):
        return {"x": dropout_backward(dout, ctx)}

    return GradcheckCase("dropout", mode, make, forward, backward)


CASES = [
    _case("train-p0.5", p=0.5, train=True),
    _case("train-p0.1", p=0.1, train=True),
    _case("train-p0", p=0.0, train=True),
    _case("eval", p=0.5, train=False),
]
