"""The compiled loops of a long prefill (kernels/prefill.py calls them; read that first), each
the twin of NumPy ops it must equal to float32 rounding (tests/kernels/test_prefill_kernels.py):

    exp_rows(scores, group, first_position, first_key, window, total)
        a score chunk's 2^score in place, with the causal (and window) rule, and its row sums:
        the exp, mask and row-sum passes of ops/tiled_attention.py's forward in one
    swiglu_rows(gate, up)          silu(gate) * up, (R, F): kernels/decode_numpy.py's twin
    swiglu_packed(both, width)     the same for gate | up packed side by side in one (R, 2F)
    rope_rows(x, cos, sin)         x * cos + rotate_half(x) * sin, x (B, H, T, D), tables (T, D):
                                   ops/rope.py's rope_forward

Each is one pass where NumPy makes several (each with its own temporary). All three need an
exponential or none: `_exp2` is 2^x as a polynomial and an exponent written into the float's
bits (Cephes' exp2f, within 2 ulp), which the compiler vectorizes; numba's own exp is one libm
call per number, and in a loop that dominates.

Imported only through kernels/choice.py (which sets numba's cache folder first); compiled on
first use and cached on disk (cache=True). note: numba's cache follows this file's own
timestamp, so the loops that call `_exp2` live in the same file as it.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

FAST = {"reassoc", "contract", "arcp"}   # reorder sums, fuse multiply-adds; keep inf/NaN rules
# error_model="numpy": x / 0 gives inf as in NumPy, with no Python check that stops vectorizing
jit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy")

LOG2E_32 = np.float32(1.0 / math.log(2.0))
F0, F1, HALF = np.float32(0.0), np.float32(1.0), np.float32(0.5)
LOWEST, HIGHEST = np.float32(-127.0), np.float32(127.0)
# Cephes exp2f: 2^r = 1 + r P(r) for r in [-0.5, 0.5]
P0, P1, P2 = np.float32(1.535336188319500e-4), np.float32(1.339887440266574e-3), \
    np.float32(9.618437357674640e-3)
P3, P4, P5 = np.float32(5.550332471162809e-2), np.float32(2.402264791363012e-1), \
    np.float32(6.931472028550421e-1)


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float32 whose 32 bits are the int32 `bits` (a bit cast, no conversion)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@jit
def _exp2(x):
    """2^x, float32: 2^n (n = round(x), written into the exponent bits) times 2^r (r = x - n in
    [-0.5, 0.5], a polynomial). x is clamped to [-127, 127]: 0 below (and for -inf), 2^127
    above, which the caller's range check then rejects (a NaN too: exp_rows' sums catch it)."""
    x = min(max(x, LOWEST), HIGHEST)
    n = np.floor(x + HALF)
    r = x - n
    poly = ((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5
    scale = _float_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))   # 2^n; n=-127: 0
    return (F1 + r * poly) * scale


@jit
def exp_rows(scores, group, first_position, first_key, window, total):
    """scores (R, W) -> 2^scores in place, 0 where the row may not look; total (R,) += row sums.

    Row r is query position first_position + r // group (G heads per position), column j is key
    first_key + j. A query sees the keys at or before its position, and with a window (> 0) only
    the last `window` of them: ops/attention.py's rule, end-aligned by the caller."""
    rows, width = scores.shape
    for r in range(rows):
        position = first_position + r // group
        stop = min(width, position - first_key + 1)              # keys <= position
        start = 0 if window == 0 else min(max(0, position - window + 1 - first_key), width)
        stop = max(stop, start)
        row = scores[r]
        row[:start] = F0
        row[stop:] = F0
        seen = row[start:stop]          # a view: indices from 0, which the compiler vectorizes
        added = F0
        nan = F0                        # x - x: 0, or NaN for a NaN score (_exp2 would hide it)
        for j in range(seen.shape[0]):
            x = seen[j]
            e = _exp2(x)
            seen[j] = e
            added += e
            nan += x - x
        total[r] += added + nan         # a NaN sum sends the tile to the twin, which keeps it


@jit
def swiglu_rows(gate, up):
    """decode_numpy.swiglu_rows: silu(gate) * up = gate / (1 + e^-gate) * up, (R, F) -> (R, F)."""
    hidden = np.empty(up.shape, np.float32)
    for r in range(up.shape[0]):
        _swiglu_row(gate[r], up[r], hidden[r])
    return hidden


@jit
def swiglu_packed(both, width):
    """swiglu_rows(both[:, :width], both[:, width:]) for both (R, 2 * width) C-contiguous, the
    gate|up product as blocks/mlp.py makes it: each row's halves are contiguous, which the
    compiler vectorizes (the two strided views are not)."""
    hidden = np.empty((both.shape[0], width), np.float32)
    for r in range(both.shape[0]):
        row = both[r]
        _swiglu_row(row[:width], row[width:], hidden[r])
    return hidden


@jit
def _swiglu_row(gate, up, out):
    """out = gate / (1 + 2^(-gate log2 e)) * up, one row."""
    for f in range(out.shape[0]):
        g = gate[f]
        out[f] = g / (F1 + _exp2(-g * LOG2E_32)) * up[f]


@jit
def rope_rows(x, cos, sin):
    """ops/rope.py's rope_forward: x * cos + rotate_half(x) * sin, rotate_half(x) =
    (-x[D/2:], x[:D/2]); x (B, H, T, D), any strides, cos and sin (T, D) -> (B, H, T, D)."""
    n, heads, t, d = x.shape
    half = d // 2
    out = np.empty((n, heads, t, d), np.float32)
    for b in range(n):
        for h in range(heads):
            for i in range(t):
                row, o, c, s = x[b, h, i], out[b, h, i], cos[i], sin[i]
                for j in range(half):
                    first, second = row[j], row[j + half]
                    o[j] = first * c[j] - second * s[j]
                    o[j + half] = second * c[j + half] + first * s[j + half]
    return out
