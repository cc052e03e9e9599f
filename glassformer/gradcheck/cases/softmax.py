"""Gradcheck cases for softmax: plain rows, a boolean mask, and a fully masked row."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.softmax import softmax_backward, softmax_forward


def _case(mode, shape, mask=None):
    def make(rng):
        return {"x": 2.0 * rng.standard_normal(shape)}

    def forward(inp):
        return softmax_forward(inp["x"], mask=mask)

    def backward(dout, ctx):
        return {"x": softmax_backward(dout, ctx)}

    return GradcheckCase("softmax", mode, make, forward, backward)


# Causal (T, S) mask with row 1 fully masked: that row's probabilities and gradient are all 0.
_MASK = np.tril(np.ones((3, 4), dtype=bool))
_MASK_NO_ROW_1 = _MASK.copy()
_MASK_NO_ROW_1[1] = False

CASES = [
    _case("rows", (2, 3, 4)),                        # (B, T, S)
    _case("causal-mask", (2, 3, 4), mask=_MASK),
    _case("fully-masked-row", (2, 3, 4), mask=_MASK_NO_ROW_1),
]
