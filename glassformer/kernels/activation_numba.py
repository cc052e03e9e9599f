"""The tanh GELU (with its slope) and SwiGLU, forward and backward, as numba loops: the twins of
ops/activation.py's gelu_forward and ops/swiglu.py (same names, arguments, checks and ctx).

Both need exp, and numba has no vector exp without Intel's SVML: a libm call per element costs
more than NumPy's whole SIMD pass. So `_exp_cubic_parts` writes Cephes' float32 expf as plain
arithmetic that vectorizes, leaving 2^k as float bits for the next loop to read through a view.
The GELU then does its 13 NumPy passes' work in two loops, SwiGLU its forward in two per row and
its backward in one. Float32 only (other inputs go to the twins); results equal the twins' to
float32 rounding (tests/kernels/test_train_kernels.py).
"""
from __future__ import annotations

import math

import numpy as np

from glassformer.kernels._numba_common import compiled_dtype, jit, rows_of
from glassformer.ops import activation, swiglu
from glassformer.ops.activation import GeluCtx, SiluCtx
from glassformer.ops.swiglu import SwigluCtx


@jit
def _exp_cubic_parts(x, linear, cubic, mantissa, exponent):
    """exp(z), z = x (linear + cubic x^2), for float32 x (1-D, any stride), as mantissa * 2^k,
    the float32 bits of 2^k written to `exponent` (int32). The tanh GELU's exp(-2u) is
    (-2 sqrt(2/pi), -2 sqrt(2/pi) 0.044715); SiLU's exp(-x) is (-1, 0). Cephes' expf: z clamped
    to [-87, 88], k the nearest integer to z / ln 2, a degree-5 polynomial on the rest
    (|r| <= ln 2 / 2). Two outputs because numba has no bit cast of a float inside a vectorized
    loop: the caller reads `exponent` as float32 through a view."""
    for i in range(x.shape[0]):
        value = x[i]
        z = min(max(value * (linear + cubic * value * value), np.float32(-87.0)),
                np.float32(88.0))
        # note: k by truncation of a positive number (z / ln 2 + 128.5 > 0), not np.floor,
        # which numba does not vectorize
        k = np.int32(z * np.float32(1.4426950408889634) + np.float32(128.5)) - np.int32(128)
        r = z - np.float32(k) * np.float32(0.693359375) - np.float32(k) * np.float32(-2.12194440e-4)
        p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        mantissa[i] = p * r * r + r + np.float32(1.0)
        exponent[i] = (k + np.int32(127)) << 23


@jit
def _gelu_tanh_slope(x, out, slope):
    """out = x g, g = sigmoid(2u) = 1 / (1 + exp(-2u)); slope = g + x g'(x) = g (1 + x (1 - g)
    2 du/dx), for flat float32 x. exp(-2u)'s two parts go through out and slope's memory, so
    the two loops need no scratch of their own."""
    slope_linear = np.float32(2.0 * math.sqrt(2.0 / math.pi))   # 2 du/dx = this + that x^2
    slope_cubic = np.float32(6.0 * math.sqrt(2.0 / math.pi) * 0.044715)
    one = np.float32(1.0)
    _exp_cubic_parts(x, np.float32(-2.0 * math.sqrt(2.0 / math.pi)),       # exp(-2u)
                     np.float32(-2.0 * math.sqrt(2.0 / math.pi) * 0.044715), out,
                     slope.view(np.int32))
    for i in range(x.shape[0]):
        value = x[i]
        gate = one / (one + out[i] * slope[i])       # sigmoid(2u); slope[i] holds 2^k until here
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
def _swiglu_rows(gates, g, ups, u, out, activated, sigmoid):
    """Per row r of gate = gates[:, g], up = ups[:, u] (N, F) (_gate_up_blocks):
    sigmoid = 1 / (1 + exp(-gate)), activated = gate sigmoid, out = activated up."""
    bits = sigmoid.view(np.int32)
    one = np.float32(1.0)
    for r in range(out.shape[0]):
        _exp_cubic_parts(gates[r, g], np.float32(-1.0), np.float32(0.0), activated[r], bits[r])
        for f in range(out.shape[1]):
            s = one / (one + activated[r, f] * sigmoid[r, f])   # sigmoid[r, f] holds 2^k here
            sigmoid[r, f] = s
            silu = gates[r, g, f] * s
            activated[r, f] = silu
            out[r, f] = silu * ups[r, u, f]


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
