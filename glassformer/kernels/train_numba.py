"""The training kernels as numba loops: LayerNorm forward and backward, the tanh GELU with its
slope, and one parameter's AdamW update, each one compiled pass where NumPy makes several.

Each public function has the name, arguments and results of its NumPy twin, the reference:

    layer_norm_forward, layer_norm_backward   ops/layer_norm.py (the same LayerNormCtx)
    gelu_forward                              ops/activation.py (the same GeluCtx)
    adamw_update                              train/optim.py's adamw_update

Where a twin takes 5-15 passes over an activation, each a NumPy call with its own temporary (a
LayerNorm's mean, centring, variance, scaling, shift; GELU's gate and slope in 13 passes; AdamW's
14), the loops here read each element once while it is in a register: a row of a LayerNorm stays
in L1 across its three short loops, and GELU and AdamW are single streams. A training step of
the Shakespeare recipe spends ~9 ms of its ~35 ms (one core, 6 rows) in these parts on the NumPy
path (docs/performance.md, "Issue 44: compiled training kernels").

Precision. The LayerNorm and GELU loops reassociate their sums (fastmath: SIMD lanes), so they
agree with the twins to float32 rounding, not bit for bit (tests/kernels/test_train_kernels.py);
the LayerNorm kernels take float32 and float64 alike (the gradient checks run them in float64).
The GELU kernel takes float32 only (other inputs go to the twin): its exp is a short polynomial
written here (`_exp_cubic_parts`), because numba has no vector exp without Intel's SVML and a scalar
exp per element would cost more than NumPy's whole SIMD pass. AdamW follows torch's operations
one by one with no fused multiply-add, so its params and moments equal the twin's bit for bit.

Imported only through kernels/choice.py's train_kernels (which sets numba's cache folder first);
compiled on first use and cached on disk (cache=True). error_model="numpy": a division by zero
gives inf, as in NumPy, and (as important here) no per-element check stops the loops from being
vectorized.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from glassformer.ops import activation, layer_norm, rms_norm, swiglu
from glassformer.ops._scalars import check_eps
from glassformer.ops.activation import GeluCtx, SiluCtx
from glassformer.ops.layer_norm import LayerNormCtx
from glassformer.ops.rms_norm import RMSNormCtx
from glassformer.ops.swiglu import SwigluCtx

FAST = {"reassoc", "contract", "arcp"}   # reorder sums, fuse multiply-adds; keep inf/NaN rules
jit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy")
# torch's AdamW operation by operation: no reassociation, no fused multiply-add
exact = numba.njit(cache=True, nogil=True, error_model="numpy")

def _rows(x: np.ndarray) -> np.ndarray:
    """x (..., C) C-contiguous -> (N, C), a view."""
    return x.reshape(-1, x.shape[-1])


def _compiled_dtype(*arrays) -> bool:
    """Whether the kernels take these arrays: one float dtype (32 or 64 bit), C-contiguous."""
    dtype = arrays[0].dtype
    return (dtype in (np.float32, np.float64)
            and all(a.dtype == dtype and a.flags.c_contiguous for a in arrays))


# ---- LayerNorm ---------------------------------------------------------------------------------

@jit
def _norm_rows(x, w, b, eps, inv_width, one, centre, y, xhat, rstd):
    """Per row of x (N, C): mean (0 unless centre: RMSNorm), variance, rstd, xhat = (x - mean)
    rstd, y = xhat w (+ b). eps, inv_width and one are scalars of x's dtype, so float32 stays
    float32."""
    width = x.shape[1]
    for r in range(x.shape[0]):
        total = eps - eps
        if centre:
            for c in range(width):
                total += x[r, c]
        mean = total * inv_width
        square = eps - eps
        for c in range(width):
            centered = x[r, c] - mean
            xhat[r, c] = centered
            square += centered * centered
        scale = one / np.sqrt(square * inv_width + eps)
        rstd[r, 0] = scale
        for c in range(width):
            normalized = xhat[r, c] * scale
            xhat[r, c] = normalized
            y[r, c] = normalized * w[c]
            if b is not None:
                y[r, c] += b[c]


@jit
def _norm_back_rows(dy, xhat, rstd, w, inv_width, centre, dx, dw, db):
    """Per row: g = dy w, dx = rstd (g - mean(g) - xhat mean(g xhat)), without the mean(g) term
    unless centre (RMSNorm); dw, db summed over rows (db None: no bias)."""
    width = dy.shape[1]
    for c in range(width):
        dw[c] = 0.0
        if db is not None:
            db[c] = 0.0
    for r in range(dy.shape[0]):
        g_total = inv_width - inv_width
        gx_total = inv_width - inv_width
        for c in range(width):
            grad = dy[r, c] * w[c]
            g_total += grad
            gx_total += grad * xhat[r, c]
            dw[c] += dy[r, c] * xhat[r, c]
            if db is not None:
                db[c] += dy[r, c]
        g_mean = g_total * inv_width if centre else inv_width - inv_width
        gx_mean = gx_total * inv_width
        scale = rstd[r, 0]
        for c in range(width):
            dx[r, c] = (dy[r, c] * w[c] - g_mean - xhat[r, c] * gx_mean) * scale


def layer_norm_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                       eps: float = 1e-5) -> tuple[np.ndarray, LayerNormCtx]:
    """ops/layer_norm.py's layer_norm_forward in one compiled pass per row (its checks, its
    ctx). Arrays the kernel does not take (mixed dtypes, non-contiguous) go to the twin."""
    layer_norm.check_layer_norm_inputs(x, w, b)
    if not _compiled_dtype(*(a for a in (x, w, b) if a is not None)):
        return layer_norm.layer_norm_forward(x, w, b, eps=eps)
    kind = x.dtype.type
    eps = kind(check_eps("eps", eps))
    rows = _rows(x)                                                   # (N, C)
    y, xhat = np.empty_like(rows), np.empty_like(rows)                # (N, C)
    rstd = np.empty((rows.shape[0], 1), x.dtype)                      # (N, 1)
    _norm_rows(rows, w, b, eps, kind(1.0 / x.shape[-1]), kind(1.0), True, y, xhat, rstd)
    lead = x.shape[:-1]
    return y.reshape(x.shape), LayerNormCtx(xhat=xhat.reshape(x.shape),
                                            rstd=rstd.reshape(lead + (1,)), w=w,
                                            has_bias=b is not None)


def layer_norm_backward(dy: np.ndarray, ctx: LayerNormCtx
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """ops/layer_norm.py's layer_norm_backward: (dx, dw, db), one compiled pass per row."""
    if not _compiled_dtype(dy, ctx.xhat, ctx.rstd, ctx.w) or dy.shape != ctx.xhat.shape:
        return layer_norm.layer_norm_backward(dy, ctx)
    width = ctx.w.shape[0]
    dy_rows = _rows(dy)                                               # (N, C)
    dx = np.empty_like(dy_rows)                                       # (N, C)
    dw = np.empty_like(ctx.w)                                         # (C,)
    db = np.empty_like(ctx.w) if ctx.has_bias else None               # (C,)
    _norm_back_rows(dy_rows, _rows(ctx.xhat), ctx.rstd.reshape(-1, 1), ctx.w,
                    dy.dtype.type(1.0 / width), True, dx, dw, db)
    return dx.reshape(dy.shape), dw, db


def rms_norm_forward(x: np.ndarray, w: np.ndarray, *, eps: float = 1e-6
                     ) -> tuple[np.ndarray, RMSNormCtx]:
    """ops/rms_norm.py's rms_norm_forward: LayerNorm's loops without the mean."""
    rms_norm.check_rms_norm_inputs(x, w)
    if not _compiled_dtype(x, w):
        return rms_norm.rms_norm_forward(x, w, eps=eps)
    kind = x.dtype.type
    eps = kind(check_eps("eps", eps))
    rows = _rows(x)                                                   # (N, C)
    y, xhat = np.empty_like(rows), np.empty_like(rows)                # (N, C)
    rstd = np.empty((rows.shape[0], 1), x.dtype)                      # (N, 1)
    _norm_rows(rows, w, None, eps, kind(1.0 / x.shape[-1]), kind(1.0), False, y, xhat, rstd)
    return y.reshape(x.shape), RMSNormCtx(xhat=xhat.reshape(x.shape),
                                          rstd=rstd.reshape(x.shape[:-1] + (1,)), w=w)


def rms_norm_backward(dy: np.ndarray, ctx: RMSNormCtx) -> tuple[np.ndarray, np.ndarray]:
    """ops/rms_norm.py's rms_norm_backward: (dx, dw)."""
    if not _compiled_dtype(dy, ctx.xhat, ctx.rstd, ctx.w) or dy.shape != ctx.xhat.shape:
        return rms_norm.rms_norm_backward(dy, ctx)
    dy_rows = _rows(dy)                                               # (N, C)
    dx, dw = np.empty_like(dy_rows), np.empty_like(ctx.w)             # (N, C), (C,)
    _norm_back_rows(dy_rows, _rows(ctx.xhat), ctx.rstd.reshape(-1, 1), ctx.w,
                    dy.dtype.type(1.0 / ctx.w.shape[0]), False, dx, dw, None)
    return dx.reshape(dy.shape), dw


# ---- the tanh GELU -----------------------------------------------------------------------------

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
        slope[i] = gate * (one + value * (one - gate) * (slope_linear + slope_cubic * value * value))


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
    """Per row r of gate = gates[:, g], up = ups[:, u] (N, F) (blocks._rows_of):
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


def _rows_of(gate: np.ndarray, up: np.ndarray):
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
    blocks = _rows_of(gate, up)
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
    blocks = _rows_of(ctx.silu.x, ctx.up)
    kept = (dout, ctx.activated, ctx.silu.sigmoid)
    if blocks is None or not _compiled_dtype(*kept) or dout.dtype != np.float32 \
            or not dout.shape == ctx.activated.shape == ctx.silu.sigmoid.shape == ctx.up.shape:
        return swiglu.swiglu_backward(dout, ctx)
    gates, g, ups, u = blocks
    dout_rows, activated, sigmoid = (_rows(a) for a in kept)                  # (N, F)
    dgate, dup = np.empty_like(dout_rows), np.empty_like(dout_rows)           # (N, F)
    _swiglu_back_rows(dout_rows, ups, u, activated, gates, g, sigmoid, dgate, dup)
    return dgate.reshape(dout.shape), dup.reshape(dout.shape)


# ---- AdamW -------------------------------------------------------------------------------------

@exact
def _adamw_flat(p, g, m, v, shrink, one_minus_beta1, beta2, one_minus_beta2,
                bias_correction2_sqrt, eps, minus_step_size):
    """train/optim.py's adamw_update on flat arrays, each element through the same float
    operations in the same order (shrink 1: no decay)."""
    for i in range(p.shape[0]):
        grad = g[i]
        param = p[i] * shrink
        moment = m[i] + (grad - m[i]) * one_minus_beta1
        second = v[i] * beta2 + grad * one_minus_beta2 * grad
        m[i] = moment
        v[i] = second
        denom = np.sqrt(second) / bias_correction2_sqrt + eps
        p[i] = param + moment / denom * minus_step_size


def adamw_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, *, shrink: float,
                 beta1: float, beta2: float, step_size: float, bias_correction2_sqrt: float,
                 eps: float) -> bool:
    """One parameter's AdamW update in place (train/optim.py's adamw_update, which says what
    each argument is). Returns False, touching nothing, when the arrays are not one float dtype,
    C-contiguous and of one shape: the caller then runs the twin."""
    if not (_compiled_dtype(p, g, m, v) and p.shape == g.shape == m.shape == v.shape):
        return False
    kind = p.dtype.type
    _adamw_flat(p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1), kind(shrink),
                kind(1.0 - beta1), kind(beta2), kind(1.0 - beta2), kind(bias_correction2_sqrt),
                kind(eps), kind(-step_size))
    return True
