"""Gradcheck cases for the activations: GELU (erf and tanh), ReLU, SiLU, sigmoid.

The GELU "erf" inputs also sit in every interval of the erfc approximation (|x / sqrt 2| below
0.47, up to 4, and beyond 4, i.e. |x| > 5.66), so a seam between intervals would show up.
"""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.activation import (gelu_backward, gelu_forward, relu_backward, relu_forward,
                                        sigmoid_backward, sigmoid_forward, silu_backward,
                                        silu_forward)

# Points on both sides of each erfc interval edge (0.46875 and 4 after dividing by sqrt 2), and
# the far tails.
_GELU_EDGES = np.array([-9.0, -5.7, -5.6, -0.67, -0.66, 0.66, 0.67, 5.6, 5.7, 9.0])


def _wide(rng):
    """Standard normals times 3, plus the interval edges: (2, 3, 4) and (10,) -> (34,)."""
    spread = 3.0 * rng.standard_normal((2, 3, 4))
    return {"x": np.concatenate([spread.ravel(), _GELU_EDGES])}


def _away_from_zero(rng):
    """ReLU has a kink at 0: keep every input at least 0.1 from it so differences never cross it."""
    raw = rng.standard_normal((2, 3, 4))
    return {"x": np.sign(raw) * (0.1 + np.abs(raw))}


def _case(name, mode, make, forward, backward):
    def run_forward(inp):
        return forward(inp["x"])

    def run_backward(dout, ctx):
        return {"x": backward(dout, ctx)}

    return GradcheckCase(name, mode, make, run_forward, run_backward)


def _gelu(approximate):
    return lambda x: gelu_forward(x, approximate=approximate)


CASES = [
    _case("gelu", "erf", _wide, _gelu("none"), gelu_backward),
    _case("gelu", "tanh", _wide, _gelu("tanh"), gelu_backward),
    _case("relu", "plain", _away_from_zero, relu_forward, relu_backward),
    _case("silu", "plain", _wide, silu_forward, silu_backward),
    _case("sigmoid", "plain", _wide, sigmoid_forward, sigmoid_backward),
]
