"""SwiGLU, the gated activation of LLaMA's MLP (Shazeer 2020, "GLU Variants Improve Transformer").

    swiglu(gate, up) = silu(gate) * up          gate, up (..., F) -> (..., F)

The LLaMA MLP composes it with three linear ops (weights stored (in, out)):

    gate = x @ w_gate      (..., C) @ (C, F) -> (..., F)
    up   = x @ w_up        (..., C) @ (C, F) -> (..., F)
    out  = swiglu(gate, up) @ w_down            (..., F) @ (F, C) -> (..., C)

This op is only the middle line; the linears stay in ops/linear.py and x's fan-out into two linears
is summed by the block. Matches HF's `LlamaMLP`: `act_fn(gate_proj(x)) * up_proj(x)` with act "silu".

Backward, with a = silu(gate) (product rule, then SiLU's own backward from ops/activation.py):

    dup   = dout * a
    dgate = silu_backward(dout * up)

ctx keeps `up` (for dgate), a = silu(gate) (for dup; recomputing it would cost another exp) and
SiLU's ctx. Derivation: docs/derivations/swiglu.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float, check_same_dtype, check_shape
from glassformer.ops.activation import SiluCtx, silu_backward, silu_forward


class SwigluCtx(NamedTuple):
    """Saved by `swiglu_forward`.

    up:         the linear branch (..., F), the factor in dgate.
    activated:  silu(gate) (..., F), the factor in dup.
    silu:       SiLU's ctx (gate and sigmoid(gate)), for SiLU's own backward.
    """
    up: np.ndarray
    activated: np.ndarray
    silu: SiluCtx


def check_swiglu_inputs(gate, up) -> None:
    """The forward's input checks (also kernels/train_numba.py's, which must fail alike)."""
    check_float("gate", gate)
    check_float("up", up)
    check_same_dtype(gate=gate, up=up)
    sizes: dict = {}
    check_shape("gate", gate, ("...", "F"), sizes)
    check_shape("up", up, ("...", "F"), sizes)       # same leading dims and F as gate


def swiglu_forward(gate: np.ndarray, up: np.ndarray) -> tuple[np.ndarray, SwigluCtx]:
    """silu(gate) * up, elementwise. gate (..., F), up (..., F) -> (..., F), same dtype.

    >>> out, _ = swiglu_forward(np.array([0.0, 1.0]), np.array([5.0, 2.0]))
    >>> np.round(out, 6).tolist()
    [0.0, 1.462117]
    """
    check_swiglu_inputs(gate, up)
    activated, silu_ctx = silu_forward(gate)
    out = activated * up
    return out, SwigluCtx(up=up, activated=activated, silu=silu_ctx)


def swiglu_backward(dout: np.ndarray, ctx: SwigluCtx) -> tuple[np.ndarray, np.ndarray]:
    """Returns (dgate, dup), each (..., F)."""
    dup = dout * ctx.activated
    dgate = silu_backward(dout * ctx.up, ctx.silu)
    return dgate, dup
