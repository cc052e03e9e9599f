"""The decode kernels as numba loops: one compiled pass where the NumPy twin makes several.

Each function has the name, arguments and results of its twin in kernels/decode_numpy.py (read
that file first: it says what each one computes, with the ops). Here the same math is spelled as
loops over rows, heads and positions, so that one call does what takes the twin a handful of
NumPy calls and temporaries: the norm's statistics and its scaling in one pass over a row; RoPE,
the cache write, the scores, the mask, the softmax and the weighted sum of one KV head's query
heads in one loop nest. Sums are float32, in a different order than NumPy's, so the two agree
to float32 rounding (tests/kernels/), not bit for bit.

Imported only through kernels/choice.py (which sets numba's cache folder first); compiled on the
first call of each kernel and cached on disk (cache=True), so a second process loads them.
fastmath allows reassociating sums (SIMD) and fused multiply-adds, nothing about inf or NaN:
masked keys are -inf scores.

Every loop here computes a row on its own, and the attention's sums over keys run in key order
(`_softmax_in_order`; the weighted sum adds key after key), so a row's numbers depend neither on
the other rows nor on where its keys sit among the cache's columns: what `serve
--batch-invariant` builds on (blocks/decode_step.py, tests/kernels/test_batch_invariance.py).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from glassformer.kernels.activation_numba import _swiglu_row

FAST = {"reassoc", "contract", "arcp"}   # reorder sums, fuse multiply-adds; keep inf/NaN rules
# error_model="numpy": a division by zero gives inf as in NumPy, and no per-element check keeps a
# loop that divides (the norms, SwiGLU) from being vectorized (as in kernels/_numba_common.py)
jit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy")
# sums over a row's keys in key order: no reassociation, so that where a row's keys sit among
# the cache's columns (masked ones add exact zeros) cannot change how they are grouped
ordered = numba.njit(cache=True, fastmath={"contract", "arcp"}, nogil=True, error_model="numpy")


@jit
def _norm_row(h, w, b, eps, rms, out):
    """out = norm(h) for one row h (C,): RMSNorm when rms, else LayerNorm (+ b when given)."""
    width = h.shape[0]
    mean = np.float32(0.0)
    if not rms:
        for c in range(width):
            mean += h[c]
        mean /= np.float32(width)
    square = np.float32(0.0)
    for c in range(width):
        centered = h[c] - mean
        square += centered * centered
    rstd = np.float32(1.0) / np.sqrt(square / np.float32(width) + np.float32(eps))
    for c in range(width):
        out[c] = (h[c] - mean) * rstd * w[c]
        if b is not None:
            out[c] += b[c]


@jit
def norm_rows(x, w, b, eps, rms):
    """decode_numpy.norm_rows: RMSNorm or LayerNorm of each row, (B, C) -> (B, C)."""
    y = np.empty_like(x)
    for row in range(x.shape[0]):
        _norm_row(x[row], w, b, eps, rms, y[row])
    return y


@jit
def add_norm_rows(x, delta, bias, w, b, eps, rms):
    """decode_numpy.add_norm_rows: h = x + (delta + bias) and norm(h), one pass per row
    ((B, 0) for the norm when w is None: the last layer's, whose next norm is the head's)."""
    h = np.empty_like(x)
    y = np.empty((x.shape[0], 0 if w is None else x.shape[1]), x.dtype)
    for row in range(x.shape[0]):
        for c in range(x.shape[1]):
            value = delta[row, c]
            if bias is not None:
                value += bias[c]
            h[row, c] = x[row, c] + value
        if w is not None:
            _norm_row(h[row], w, b, eps, rms, y[row])
    return h, y


@jit
def swiglu_rows(gate, up):
    """decode_numpy.swiglu_rows: silu(gate) * up, (B, F)."""
    hidden = np.empty_like(up)
    for row in range(up.shape[0]):
        for f in range(up.shape[1]):
            g = gate[row, f]
            hidden[row, f] = g / (np.float32(1.0) + np.exp(-g)) * up[row, f]
    return hidden


@jit
def _down_four(hidden, down_t, m, c):
    """m[:, c:c+4] = hidden @ down_t[c:c+4].T: four rows of W_down^T read together, each hidden
    value loaded once for the four (four independent sums: the loop keeps its SIMD lanes busy)."""
    w0, w1, w2, w3 = down_t[c], down_t[c + 1], down_t[c + 2], down_t[c + 3]
    for row in range(hidden.shape[0]):
        h = hidden[row]
        t0 = t1 = t2 = t3 = np.float32(0.0)
        for f in range(h.shape[0]):
            value = h[f]
            t0 += value * w0[f]
            t1 += value * w1[f]
            t2 += value * w2[f]
            t3 += value * w3[f]
        m[row, c], m[row, c + 1], m[row, c + 2], m[row, c + 3] = t0, t1, t2, t3


@jit
def _down_one(hidden, down_t, m, c):
    """m[:, c] = hidden @ down_t[c]: the rows past the last group of four."""
    w = down_t[c]
    for row in range(hidden.shape[0]):
        total = np.float32(0.0)
        for f in range(w.shape[0]):
            total += hidden[row, f] * w[f]
        m[row, c] = total


@jit
def _swiglu_into(gate, up, hidden):
    """hidden = silu(gate) * up (B, F): activation_numba's row loop (exp_numba's vectorized
    expf; numba's np.exp is a scalar libm call a number, ~3x this whole loop)."""
    for row in range(up.shape[0]):
        _swiglu_row(gate[row], up[row], hidden[row], None, None)


@jit
def _swiglu_down_serial(gate, up, down_t, bias, h, w, b, eps, rms):
    hidden = np.empty_like(up)                                    # (B, F), in L1
    _swiglu_into(gate, up, hidden)
    m = np.empty_like(h)                                          # (B, C)
    groups = down_t.shape[0] // 4
    for g in range(groups):
        _down_four(hidden, down_t, m, 4 * g)
    for c in range(4 * groups, down_t.shape[0]):
        _down_one(hidden, down_t, m, c)
    return add_norm_rows(h, m, bias, w, b, eps, rms)


def swiglu_down_norm_rows(gate, up, down_t, bias, h, w, b, eps, rms):
    """decode_numpy.swiglu_down_norm_rows: the MLP's end in one call, its down product included
    (W_down^T streamed four rows at a time) on one thread. With more threads the down product is
    BLAS's, which splits it: a numba prange here measured 6 ms a call against 0.25 ms on one
    thread (SmolLM2, 2 cores), its threads and OpenBLAS's spinning ones taking turns."""
    if numba.get_num_threads() > 1:
        return add_norm_rows(h, swiglu_rows(gate, up) @ down_t.T, bias, w, b, eps, rms)
    return _swiglu_down_serial(gate, up, down_t, bias, h, w, b, eps, rms)


@jit
def gelu_rows(up, bias, approximate):
    """decode_numpy.gelu_rows: GELU(up + bias), exact or tanh, (B, F)."""
    hidden = np.empty_like(up)
    root_2_over_pi = np.float32(math.sqrt(2.0 / math.pi))
    inv_root_2 = 1.0 / math.sqrt(2.0)
    for row in range(up.shape[0]):
        for f in range(up.shape[1]):
            u = up[row, f]
            if bias is not None:
                u += bias[f]
            if approximate:
                # 0.5 u (1 + tanh(z)) = u sigmoid(2 z): one exp, where numba's tanh is a scalar
                # libm call (about 3x the time of the whole row's exps)
                inner = root_2_over_pi * (u + np.float32(0.044715) * u * u * u)
                hidden[row, f] = u / (np.float32(1.0) + np.exp(np.float32(-2.0) * inner))
            else:  # the exact erf in float64, as ops/activation.py's float32 GELU is exact too
                hidden[row, f] = 0.5 * u * (1.0 + math.erf(u * inv_root_2))
    return hidden


@jit
def _rotated(lin, bias, start, cos, sin, row, out):
    """out (D,) = one head of lin[row] from column `start` (+ bias), RoPE'd when cos is given:
    x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[D/2:], x[:D/2])."""
    d = out.shape[0]
    half = d // 2
    for i in range(d):
        out[i] = lin[row, start + i]
        if bias is not None:
            out[i] += bias[start + i]
    if cos is not None:
        for i in range(half):
            first, second = out[i], out[i + half]
            out[i] = first * cos[row, i] - second * sin[row, i]
            out[i + half] = second * cos[row, i + half] + first * sin[row, i + half]


@ordered
def _softmax_in_order(scores, best, keys):
    """scores[:keys] -> their softmax in place (a masked -inf gives 0), the denominator summed
    key by key in order: a row's weights are then the same wherever its keys sit in the cache
    and whatever other rows share it (serve --batch-invariant, docs/serve.md)."""
    denominator = np.float32(0.0)
    for j in range(keys):
        weight = np.float32(0.0)
        if best != -np.inf and scores[j] != -np.inf:
            weight = np.exp(scores[j] - best)
        scores[j] = weight
        denominator += weight
    if denominator > 0.0:
        for j in range(keys):
            scores[j] /= denominator


@jit
def attend_step(q, k, v, bq, bk, bv, cos, sin, k_cache, v_cache, length, key_mask):
    """decode_numpy.attend_step: biases, RoPE, the cache write at column `length` and attention
    over columns [0, length], every row and head in one call -> (B, H*D)."""
    rows, n_kv, d = q.shape[0], k_cache.shape[1], k_cache.shape[3]
    n_head = q.shape[1] // d
    group = n_head // n_kv
    keys = length + 1
    scale = np.float32(1.0 / math.sqrt(d))
    out = np.zeros((rows, n_head * d), q.dtype)
    queries = np.empty((group, d), q.dtype)      # the G query heads that share one KV head
    scores = np.empty((group, keys), np.float32)
    best = np.empty(group, np.float32)
    for row in range(rows):
        for kv in range(n_kv):
            # this step's key (rotated) and value go into the cache at column `length`
            _rotated(k, bk, kv * d, cos, sin, row, k_cache[row, kv, length])
            for i in range(d):
                value = v[row, kv * d + i]
                if bv is not None:
                    value += bv[kv * d + i]
                v_cache[row, kv, length, i] = value
            for g in range(group):
                _rotated(q, bq, (kv * group + g) * d, cos, sin, row, queries[g])
                best[g] = -np.inf
            # scores, key by key: each cached key is read once for the G heads that share it
            for j in range(keys):
                if key_mask is not None and not key_mask[row, j]:
                    scores[:, j] = -np.inf
                    continue
                key = k_cache[row, kv, j]
                for g in range(group):
                    total = np.float32(0.0)
                    for i in range(d):
                        total += queries[g, i] * key[i]
                    scores[g, j] = total * scale
                    best[g] = max(best[g], scores[g, j])
            # softmax per head (no key allowed: the head's output stays zero, as ops/ gives)
            for g in range(group):
                _softmax_in_order(scores[g], best[g], keys)
            # the weighted sum of the values, each value read once for the G heads
            for j in range(keys):
                value = v_cache[row, kv, j]
                for g in range(group):
                    weight = scores[g, j]
                    if weight != 0.0:
                        start = (kv * group + g) * d
                        for i in range(d):
                            out[row, start + i] += weight * value[i]
    return out
