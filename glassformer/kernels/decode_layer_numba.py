"""One decoded layer, products included, in one compiled call (one row: batch-1 decoding).

blocks/decode_step.py cuts a layer into four BLAS products and three or four kernels, each a call
from Python. For a narrow model those calls' fixed costs (the interpreter, NumPy's and numba's
argument checks, the result arrays) are a tenth of a token: SmolLM2's 30 layers of width 576 make
~240 of them a token, most between products of 50-250 µs. Here the layer is one call: the same
kernels (kernels/decode_numba.py's loops) and the same products, made by NumPy's own OpenBLAS
routine called from inside the loop (kernels/blas_numba.py: `cblas_sgemv` with NumPy's arguments,
so the same numbers and BLAS's own threads; nothing here starts a thread of numba's).

    xn       given: norm1(x), from the layer before (or decode_step's first norm)
    q|k|v    = xn @ qkv                          BLAS (packed, row-major)
    out      = attend_step(q, k, v, ...)         biases, RoPE, cache write, attention
    a        = out @ wo                          BLAS
    h, hn    = add_norm_rows(x, a, bo, norm2)
    u        = hn @ up                           BLAS: gate | up packed (SwiGLU) or w_up (GELU)
    hidden   = silu(gate) * up   or  gelu(u + b_up)
    m        = hidden @ w_down                   BLAS, or streamed here (`own_down`, below)
    x, xn    = add_norm_rows(h, m, b_down, next norm1)

Its twin is decode_numpy.layer_step (the same lines with `@` and the NumPy kernels); the two
agree to float32 rounding (tests/kernels/test_decode_layer_kernel.py), and this one gives the
same numbers as blocks/decode_step.py's call-by-call path on the compiled kernels.

`own_down` (one thread, and W_down^T lying row by row): the down product is the loop's own, four
rows of W_down^T at a time (kernels/decode_numba.py's `_down_four`: 8% faster than OpenBLAS's
one-thread sgemv on SmolLM2's 576 x 1536), as the call-by-call path's fused MLP end does.
"""
from __future__ import annotations

import numba
import numpy as np

from glassformer.kernels.blas_numba import FOUND, matvec_into  # noqa: F401  (FOUND: choice.py)
from glassformer.kernels.decode_numba import (_down_four, _down_one, _swiglu_into, add_norm_rows,
                                              attend_step, gelu_rows, jit)

SWIGLU, GELU, GELU_TANH = 0, 1, 2            # the MLP's kind (`mlp` below)


@jit
def _product(x, w):
    """x (1, K) @ w (K, N) -> (1, N) by BLAS (blas_numba.matvec_into)."""
    y = np.empty((1, w.shape[1]), np.float32)
    matvec_into(x[0], w, y[0])
    return y


@jit
def _down_rows(hidden, down_t):
    """hidden (1, F) @ down_t.T (down_t (C, F) row-major) -> (1, C), four rows at a time."""
    m = np.empty((1, down_t.shape[0]), np.float32)
    groups = down_t.shape[0] // 4
    for g in range(groups):
        _down_four(hidden, down_t, m, 4 * g)
    for c in range(4 * groups, down_t.shape[0]):
        _down_one(hidden, down_t, m, c)
    return m


def layer_step(x, xn, qkv, width_q, width_kv, bq, bk, bv, cos, sin, k_cache, v_cache, length,
               key_mask, wo, bo, norm2_w, norm2_b, up, b_up, mlp, w_down, b_down, own_down,
               next_w, next_b, eps, rms):
    """decode_numpy.layer_step (see _layer_step). own_down: the caller allows the loop's own down
    product (w_down.T row-major); taken on one thread only (with more, BLAS's splits it)."""
    return _layer_step(x, xn, qkv, width_q, width_kv, bq, bk, bv, cos, sin, k_cache, v_cache,
                       length, key_mask, wo, bo, norm2_w, norm2_b, up, b_up, mlp, w_down, b_down,
                       own_down and numba.get_num_threads() == 1, next_w, next_b, eps, rms)


@jit
def _layer_step(x, xn, qkv, width_q, width_kv, bq, bk, bv, cos, sin, k_cache, v_cache, length,
               key_mask, wo, bo, norm2_w, norm2_b, up, b_up, mlp, w_down, b_down, own_down,
               next_w, next_b, eps, rms):
    """decode_numpy.layer_step: x, xn = norm1(x) (1, C) -> the layer's output x and the next
    layer's norm1 of it ((1, 0) when next_w is None), the cache written at column `length`.
    qkv (C, (H + 2K) D): q | k | v packed, widths width_q = H D, width_kv = K D. up (C, 2F)
    gate | up packed for SwiGLU (mlp 0), (C, F) for GELU (1: exact, 2: tanh). w_down (F, C);
    own_down: stream it here (w_down.T row-major) instead of BLAS."""
    both = _product(xn, qkv)                                      # (1, (H + 2K) D)
    q = both[:, :width_q]
    k = both[:, width_q:width_q + width_kv]
    v = both[:, width_q + width_kv:]
    out = attend_step(q, k, v, bq, bk, bv, cos, sin, k_cache, v_cache, length, key_mask)
    h, hn = add_norm_rows(x, _product(out, wo), bo, norm2_w, norm2_b, eps, rms)   # (1, C) each
    lifted = _product(hn, up)                                     # (1, 2F) or (1, F)
    if mlp == SWIGLU:
        width = lifted.shape[1] // 2
        hidden = np.empty((1, width), np.float32)
        _swiglu_into(lifted[:, :width], lifted[:, width:], hidden)
    else:
        hidden = gelu_rows(lifted, b_up, mlp == GELU_TANH)
    if own_down:
        m = _down_rows(hidden, w_down.T)
    else:
        m = _product(hidden, w_down)                              # (1, C)
    return add_norm_rows(h, m, b_down, next_w, next_b, eps, rms)
