"""The tanh GELU (with its slope) and SwiGLU, forward and backward, as numba loops: the twins of
ops/activation.py's gelu_forward and ops/swiglu.py (same names, arguments, checks and ctx).

Both need exp: exp_numba.py's expf, which vectorizes (numba's own exp is a libm call per
element, slower than NumPy's whole SIMD pass). The GELU does its 13 NumPy passes' work in one
loop, SwiGLU its forward in one per row and its backward in one.

The SwiGLU forward is the one compiled SiLU gate: training's (which keeps the sigmoid and
silu(gate) for the backward) and the prefill's (`swiglu_rows`, kernels/prefill.py: no backward
follows, so nothing is kept) run the same loop, on one thread (numba's prange beside OpenBLAS's
spinning threads measured slower on a quiet 2-core machine). Float32 only (other inputs go to the twins); results
equal the twins' to float32 rounding (tests/kernels/test_train_kernels.py,
test_prefill_kernels.py).
"""
from __future__ import annotations

import math

import numpy as np

from glassformer.kernels import decode_numpy
from glassformer.kernels._numba_common import compiled_dtype, jit, rows_of
from glassformer.kernels.exp_numba import expf
from glassformer.ops import activation, swiglu
from glassformer.ops.activation import GeluCtx, SiluCtx
from glassformer.ops.swiglu import SwigluCtx


@jit
def _gelu_tanh_slope(x, out, slope):
    """out = x g, g = sigmoid(2u) = 1 / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3);
    slope = g + x g'(x) = g (1 + x (1 - g) 2 du/dx), for flat float32 x, one loop."""
    minus_two_linear = np.float32(-2.0 * math.sqrt(2.0 / math.pi))        # -2u = x (this +
    minus_two_cubic = np.float32(-2.0 * math.sqrt(2.0 / math.pi) * 0.044715)   # that x^2)
    slope_linear = np.float32(2.0 * math.sqrt(2.0 / math.pi))   # 2 du/dx = this + that x^2
    slope_cubic = np.float32(6.0 * math.sqrt(2.0 / math.pi) * 0.044715)
    one = np.float32(1.0)
    for i in range(x.shape[0]):
        value = x[i]
        gate = one / (one + expf(value * (minus_two_linear + minus_two_cubic * value * value)))
        out[i] = value * gate
        two_du = slope_linear + slope_cubic * value * value      # 2 du/dx
        slope[i] = gate * (one + value * (one - gate) * two_du)


def gelu_forward(x: np.ndarray, *, approximate: str = "none", keep_slope: bool = True
                 ) -> tuple[np.ndarray, GeluCtx]:
    """ops/activation.py's gelu_forward. The tanh form on float32 runs here in one compiled
    pass (out and slope); anything else (the exact form, float64) runs the twin."""
    if approximate != "tanh" or not isinstance(x, np.ndarray) or x.dtype != np.float32 \
            or not x.flags.c_contiguous:
        return activation.gelu_forward(x, approximate=approximate, keep_slope=keep_slope)
    flat = x.reshape(-1)
    out, slope = np.empty_like(flat), np.empty_like(flat)   # (N,): the slope's memory is
    _gelu_tanh_slope(flat, out, slope)                      # scratch when it is not kept
    return out.reshape(x.shape), GeluCtx(slope=slope.reshape(x.shape) if keep_slope else None)


# ---- SwiGLU ------------------------------------------------------------------------------------

@jit
def _swiglu_row(gate, up, out, activated, sigmoid):
    """One row: s = 1 / (1 + e^-gate), out = gate s up; activated = gate s and sigmoid = s
    when they are arrays (training's ctx), skipped when None (the compiler drops the stores)."""
    one = np.float32(1.0)
    for f in range(out.shape[0]):
        g = gate[f]
        s = one / (one + expf(-g))
        silu = g * s
        out[f] = silu * up[f]
        if activated is not None:
            activated[f] = silu
            sigmoid[f] = s


@jit
def _swiglu_rows(gates, g, ups, u, out, activated, sigmoid):
    """Per row r of gate = gates[:, g], up = ups[:, u] (N, F) (_gate_up_blocks): out = silu(gate)
    up, and activated = silu(gate), sigmoid = sigmoid(gate) unless they are None."""
    for r in range(out.shape[0]):
        _swiglu_row(gates[r, g], ups[r, u], out[r], None if activated is None else activated[r],
                    None if sigmoid is None else sigmoid[r])


@jit
def _swiglu_back_rows(dout, ups, u, activated, gates, g, sigmoid, dgate, dup):
    """dup = dout silu(gate); dgate = (dout up) s (1 + gate (1 - s)), per row, one pass."""
    one = np.float32(1.0)
    for r in range(dout.shape[0]):
        for f in range(dout.shape[1]):
            grad = dout[r, f]
            s = sigmoid[r, f]
            dup[r, f] = grad * activated[r, f]
            dgate[r, f] = grad * ups[r, u, f] * (s * (one + gates[r, g, f] * (one - s)))


def _gate_up_blocks(gate: np.ndarray, up: np.ndarray):
    """gate and up (..., F) float32 as C-contiguous blocks the loops index without strides:
    (gates, g, ups, u) with gate = gates[:, g, :] and up = ups[:, u, :] as (N, F); None when
    they are neither each contiguous nor the two halves of one packed gate|up row
    (blocks/mlp.py's packed product)."""
    width = gate.shape[-1]
    if gate.dtype != np.float32 or up.dtype != np.float32 or gate.shape != up.shape:
        return None
    if gate.flags.c_contiguous and up.flags.c_contiguous:
        return gate.reshape(-1, 1, width), 0, up.reshape(-1, 1, width), 0
    start = gate.__array_interface__["data"][0]
    packed = (up.__array_interface__["data"][0] == start + width * 4
              and gate.strides[-1] == up.strides[-1] == 4 and gate.strides == up.strides
              and gate.ndim >= 2 and gate.strides[-2] == 2 * width * 4
              and all(gate.strides[i] == gate.strides[i + 1] * gate.shape[i + 1]
                      for i in range(gate.ndim - 2)))
    if not packed:
        return None
    rows = gate.size // width
    both = np.lib.stride_tricks.as_strided(gate, shape=(rows, 2, width),
                                           strides=(2 * width * 4, width * 4, 4))
    return both, 0, both, 1                              # (N, 2, F): C-contiguous, a view


def swiglu_forward(gate: np.ndarray, up: np.ndarray) -> tuple[np.ndarray, SwigluCtx]:
    """ops/swiglu.py's swiglu_forward (its checks, its ctx) in one compiled pass per row, for
    float32 gate and up that are contiguous or a packed pair; anything else runs the twin."""
    swiglu.check_swiglu_inputs(gate, up)
    blocks = _gate_up_blocks(gate, up)
    if blocks is None:
        return swiglu.swiglu_forward(gate, up)
    rows = (gate.size // gate.shape[-1], gate.shape[-1])
    out, activated, sigmoid = (np.empty(rows, np.float32) for _ in range(3))   # (N, F)
    _swiglu_rows(*blocks, out, activated, sigmoid)
    shape = gate.shape
    return out.reshape(shape), SwigluCtx(up=up, activated=activated.reshape(shape),
                                         silu=SiluCtx(x=gate, sigmoid=sigmoid.reshape(shape)))


def swiglu_rows(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """kernels/decode_numpy.py's swiglu_rows, silu(gate) * up for (..., F), with no ctx (no
    backward follows: a prefill): swiglu_forward's loop without its two kept arrays. Gate and
    up that are neither float32 and contiguous nor the two halves of one packed (..., 2F)
    product (blocks/mlp.py's gate|up) run the twin."""
    blocks = _gate_up_blocks(gate, up) if gate.ndim >= 1 and gate.shape[-1] else None
    if blocks is None:
        return decode_numpy.swiglu_rows(gate, up)
    rows = gate.size // gate.shape[-1]
    out = np.empty((rows, gate.shape[-1]), np.float32)                           # (N, F)
    _swiglu_rows(*blocks, out, None, None)
    return out.reshape(gate.shape)


def swiglu_backward(dout: np.ndarray, ctx: SwigluCtx) -> tuple[np.ndarray, np.ndarray]:
    """ops/swiglu.py's swiglu_backward: (dgate, dup), one compiled pass."""
    blocks = _gate_up_blocks(ctx.silu.x, ctx.up)
    kept = (dout, ctx.activated, ctx.silu.sigmoid)
    if blocks is None or not compiled_dtype(*kept) or dout.dtype != np.float32 \
            or not dout.shape == ctx.activated.shape == ctx.silu.sigmoid.shape == ctx.up.shape:
        return swiglu.swiglu_backward(dout, ctx)
    gates, g, ups, u = blocks
    dout_rows, activated, sigmoid = (rows_of(a) for a in kept)                  # (N, F)
    dgate, dup = np.empty_like(dout_rows), np.empty_like(dout_rows)           # (N, F)
    _swiglu_back_rows(dout_rows, ups, u, activated, gates, g, sigmoid, dgate, dup)
    return dgate.reshape(dout.shape), dup.reshape(dout.shape)
