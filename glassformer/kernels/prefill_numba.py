"""The compiled loops of a long prefill (kernels/prefill.py calls them; read that first), each
the twin of NumPy ops it must equal to float32 rounding (tests/kernels/test_prefill_kernels.py):

    exp_rows(scores, group, first_position, first_key, window, total)
        a score chunk's 2^score in place, with the causal (and window) rule, and its row sums:
        the exp, mask and row-sum passes of ops/tiled_attention.py's forward in one
    rope_rows(x, cos, sin)         x * cos + rotate_half(x) * sin, x (B, H, T, D), tables (T, D):
                                   ops/rope.py's rope_forward
    rope_heads(x, cos, sin, out)   the same for one chunk of positions as the joined q|k|v product
                                   lays them, x (T, H, D), written into out (H, T, D) (a cache's
                                   columns, any strides): blocks/prefill_block.py's RoPE

Each is one pass where NumPy makes several (each with its own temporary). The exponential is
exp_numba.py's exp2f, shared with the other kernels (SwiGLU, the one compiled SiLU gate, lives
in activation_numba.py and serves the prefill too). exp_rows needs no threaded twin: the
attention's query tiles are spread over threads whole (kernels/spread.py).

Imported only through kernels/choice.py (which sets numba's cache folder first); compiled on
first use and cached on disk (cache=True).
"""
from __future__ import annotations

import numpy as np

from glassformer.kernels._numba_common import jit
from glassformer.kernels.exp_numba import exp2f

F0 = np.float32(0.0)


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
        nan = F0                        # x - x: 0, or NaN for a NaN score (exp2f would hide it)
        for j in range(seen.shape[0]):
            x = seen[j]
            e = exp2f(x)
            seen[j] = e
            added += e
            nan += x - x
        total[r] += added + nan         # a NaN sum sends the tile to the twin, which keeps it


@jit
def _rope_row(row, c, s, o):
    """One position of one head: o = row * c + rotate_half(row) * s."""
    half = row.shape[0] // 2
    for j in range(half):
        first, second = row[j], row[j + half]
        o[j] = first * c[j] - second * s[j]
        o[j + half] = second * c[j + half] + first * s[j + half]


@jit
def rope_rows(x, cos, sin):
    """ops/rope.py's rope_forward: x * cos + rotate_half(x) * sin, rotate_half(x) =
    (-x[D/2:], x[:D/2]); x (B, H, T, D), any strides, cos and sin (T, D) -> (B, H, T, D)."""
    n, heads, t, d = x.shape
    out = np.empty((n, heads, t, d), np.float32)
    for b in range(n):
        for h in range(heads):
            for i in range(t):
                _rope_row(x[b, h, i], cos[i], sin[i], out[b, h, i])
    return out


@jit
def rope_heads(x, cos, sin, out):
    """rope_rows for x (T, H, D) (positions first, as a q|k|v product's rows hold them), the
    result written into out (H, T, D), any strides (the KV cache's columns, the queries' array):
    one pass, no (B, H, T, D) copy of x first. cos and sin (T, D)."""
    t, heads, _ = x.shape
    for h in range(heads):
        for i in range(t):
            _rope_row(x[i, h], cos[i], sin[i], out[h, i])
