"""gpt-oss's clamped SwiGLU, the activation of its experts.

    g   = min(gate, limit)                    the gate clipped from above only
    u   = clip(up, -limit, limit)
    out = (u + 1) * g * sigmoid(alpha g)      gate, up (..., F) -> (..., F)

With alpha = 1.702, g * sigmoid(alpha g) is the sigmoid approximation of GELU; the clamps
(limit = 7) bound what one expert can emit, and the + 1 lets the linear branch pass the gate
through when up is 0. Matches transformers' `GptOssExperts._apply_gate` (after the interleaved
gate/up split, which io/hf/gpt_oss.py undoes on load).

Backward (torch's clamp passes the gradient where the input lies inside the bounds):

    s       = sigmoid(alpha g)
    dup     = dout * g s                               where -limit <= up <= limit, else 0
    dgate   = dout * (u + 1) * (s + alpha g s (1 - s))  where gate <= limit, else 0

ctx keeps g, u, s and the two in-bound masks.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float, check_same_dtype, check_shape


class ClampedSwigluCtx(NamedTuple):
    """Saved by the forward: the clamped gate g and up u, s = sigmoid(alpha g), alpha, and where
    gate and up were inside their clamps (the gradient passes there only)."""
    gate: np.ndarray
    up: np.ndarray
    sig: np.ndarray
    alpha: float
    gate_inside: np.ndarray
    up_inside: np.ndarray


def clamped_swiglu_forward(gate: np.ndarray, up: np.ndarray, *, alpha: float, limit: float
                           ) -> tuple[np.ndarray, ClampedSwigluCtx]:
    """(min(gate, limit) * sigmoid(alpha g)) * (clip(up, +-limit) + 1), (..., F) each.

    >>> out, _ = clamped_swiglu_forward(np.array([0.0, 9.0]), np.array([1.0, -9.0]),
    ...                                 alpha=1.0, limit=7.0)
    >>> np.round(out, 4).tolist()
    [0.0, -41.9617]
    """
    check_float("gate", gate)
    check_float("up", up)
    check_same_dtype(gate=gate, up=up)
    sizes: dict = {}
    check_shape("gate", gate, ("...", "F"), sizes)
    check_shape("up", up, ("...", "F"), sizes)
    g = np.minimum(gate, limit)
    u = np.clip(up, -limit, limit)
    sig = 1.0 / (1.0 + np.exp(-alpha * g))                  # a Python float keeps float32
    out = (u + 1.0) * (g * sig)
    return out, ClampedSwigluCtx(g, u, sig, float(alpha), gate <= limit,
                                 (up >= -limit) & (up <= limit))


def clamped_swiglu_backward(dout: np.ndarray, ctx: ClampedSwigluCtx
                            ) -> tuple[np.ndarray, np.ndarray]:
    """Returns (dgate, dup), each (..., F)."""
    g, s = ctx.gate, ctx.sig
    dup = dout * (g * s) * ctx.up_inside
    slope = s + ctx.alpha * g * s * (1.0 - s)               # d (g sigmoid(alpha g)) / d g
    dgate = dout * (ctx.up + 1.0) * slope * ctx.gate_inside
    return dgate, dup
