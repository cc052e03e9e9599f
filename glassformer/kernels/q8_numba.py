"""llama.cpp's 8-bit activation products as numba loops: int8 x int8 -> int32 sums a block.

    activation_product(x, kind, blocks, cols)    y = x @ W^T, x rounded to 8-bit blocks first

the compiled twin of ops/quant/activations_q8.py (the NumPy reference: read its docstring for the
formats and the order of the sums), with the same arguments and the same bits:

- `quantize_q8` rounds each block of 32 values of x to int8 codes, its float16 scale d and
  (Q8_1) s = float16(d * sum(q)), as `quantize_activations`; float16 rounding is done by hand
  (`_to_half`: numba has no float16), equal to NumPy's astype(float16) for every float32;
- each product reads W one row at a time: it unpacks the row's integer codes (q - 8 for Q4_0,
  q - 16 for Q5_0, the nibbles for Q4_1, int8 for Q8_0) into an L1 scratch laid out (32, blocks),
  takes every x row's integer dot products with all blocks at once (`_block_sums`, a loop along
  the blocks that vectorizes; 32-long loops a block did not) and adds (dx * dw) * sum into a
  float32 total, block after block; Q4_1 adds sx * mw apart, then the two.

The integers are held as float32 (exact: every partial sum of a block is under 2^24), so the
block dot products vectorize with fastmath and still give the exact integer (int8 x int8 -> int32
as llama.cpp does it, in float lanes); the scale products and the sum over blocks run without
fastmath: a fused multiply-add or a reordered sum there would round otherwise than the NumPy twin,
and the parity test asks for equal bits.
Q8_K (for Q4_K weights) stays on the NumPy reference: SmolLM2's rows (576) are not a multiple of
its 256, so no shipped SmolLM2 file uses it.

Imported only through kernels/choice.py (`q8_kernels`), which sets numba's cache folder first.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from glassformer.kernels.quant_numba import HALF_VALUES, _half

jit = numba.njit(cache=True, nogil=True, error_model="numpy")
KINDS = ("q8_0", "q4_0", "q5_0", "q4_1")
BYTES = {"q8_0": 34, "q4_0": 18, "q5_0": 22, "q4_1": 20}
CODE = {"q8_0": 0, "q4_0": 1, "q5_0": 2, "q4_1": 3}


@jit
def _to_half(v):
    """float32 v rounded to the nearest float16 (half to even), as float32: exact powers of two
    scale the rounding step, so np.rint does it (subnormal float16 step 2^-24; inf past 65504)."""
    a = abs(v)
    if a == 0.0 or not math.isfinite(v):
        return v
    _, e = math.frexp(a)                                   # a = f * 2^e, 0.5 <= f < 1
    step = math.ldexp(1.0, max(e - 11, -24))               # float16 keeps 11 significant bits
    r = np.float32(np.rint(np.float64(v) / step) * step)   # exact: step is a power of two
    return np.float32(np.inf) * np.sign(v) if abs(r) > 65504.0 else r


@jit
def quantize_q8(x, with_sums, codes, d, s):
    """x (N, C) float32 -> codes (N, C) (int8 values held as float32), d (N, C/32), s (N, C/32)
    (Q8_1's sums when with_sums, else left as given): activations_q8.quantize_activations's twin."""
    for i in range(x.shape[0]):
        for b in range(x.shape[1] // 32):
            top = np.float32(0.0)
            for j in range(32):
                top = max(top, abs(x[i, b * 32 + j]))
            inv = np.float32(0.0) if top == 0 else np.float32(127.0) / top
            total = 0
            for j in range(32):
                q = np.rint(x[i, b * 32 + j] * inv)
                codes[i, b * 32 + j] = q
                total += np.int32(q)
            scale = top / np.float32(127.0)
            if with_sums:
                s[i, b] = _to_half(np.float32(scale * np.float32(total)))
            d[i, b] = _to_half(scale)


@jit
def _unpack(kind, size, row, wt, dws, mws, halves):
    """One row of W's blocks -> its integers as float32, block b's value j at wt[j, b] (q - 8
    for Q4_0, q - 16 for Q5_0, the nibbles for Q4_1, the int8 codes for Q8_0), the scales dws
    (nb,), Q4_1's minimums mws (nb,)."""
    half = wt.shape[0] // 2                                # 16, read at run time
    for b in range(dws.shape[0]):
        at = b * size
        dws[b] = _half(halves, row, at)
        if kind == 0:                                      # q8_0: int8 codes
            for j in range(2 * half):
                c = np.float32(row[at + 2 + j])
                wt[j, b] = c - np.float32(256.0) if c >= 128 else c
            continue
        first = at + (2 if kind == 1 else 6 if kind == 2 else 4)
        centre = np.float32(8.0 if kind == 1 else 16.0 if kind == 2 else 0.0)
        for j in range(half):
            c = np.float32(row[first + j])
            high = np.floor(c * np.float32(0.0625))        # byte >> 4, in float lanes
            wt[j, b] = c - np.float32(16.0) * high - centre
            wt[j + half, b] = high - centre
        if kind == 2:                                      # q5_0: the fifth bits, 32 of them
            top = (np.int64(row[at + 2]) | (np.int64(row[at + 3]) << 8)
                   | (np.int64(row[at + 4]) << 16) | (np.int64(row[at + 5]) << 24))
            for j in range(2 * half):
                wt[j, b] += np.float32(16.0) * np.float32((top >> j) & 1)
        if kind == 3:                                      # q4_1: the minimum
            mws[b] = _half(halves, row, at + 2)


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _block_sums(codes_t, i, wt, sums):
    """sums[b] = sum_j codes_t[i, j, b] * wt[j, b]: every block's dot product at once, the loop
    running along the blocks (vectorized). The values are integers and every partial sum stays
    under 2^24 (32 * 127 * 127), so float32 gives the exact integer in any order: fastmath here
    (only here) changes no bit."""
    sums[:] = 0.0
    for j in range(wt.shape[0]):
        for b in range(wt.shape[1]):
            sums[b] += codes_t[i, j, b] * wt[j, b]


@jit
def q8_product(kind, size, codes_t, d, s, blocks, halves, y):
    """y (N, R) = x @ W^T from x's 8-bit blocks (codes_t (N, 32, nb): block b's code j at
    [i, j, b], float32 integers; d, s) and W's blocks (R, row bytes): activations_q8.q8_product's
    twin, the same sums in the same order."""
    n, rows, nb = codes_t.shape[0], blocks.shape[0], d.shape[1]
    wt = np.empty((codes_t.shape[1], nb), np.float32)              # (32, nb)
    dws, mws = np.empty(nb, np.float32), np.zeros(nb, np.float32)
    sums = np.empty(nb, np.float32)
    for r in range(rows):
        _unpack(kind, size, blocks[r], wt, dws, mws, halves)
        for i in range(n):
            _block_sums(codes_t, i, wt, sums)
            total = np.float32(0.0)
            lows = np.float32(0.0)
            for b in range(nb):
                total += (d[i, b] * dws[b]) * sums[b]
                lows += s[i, b] * mws[b]
            y[i, r] = total + lows if kind == 3 else total


def activation_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """activations_q8.activation_product's twin for Q8_0, Q4_0, Q5_0 and Q4_1 weights:
    x (N, C) float32 -> y (N, R) float32, equal bit for bit."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[0]
    codes = np.empty((n, cols), np.float32)                 # int8 values, held as float32
    d = np.empty((n, cols // 32), np.float32)
    s = np.zeros((n, cols // 32), np.float32)
    quantize_q8(x, kind == "q4_1", codes, d, s)
    codes_t = np.ascontiguousarray(codes.reshape(n, -1, 32).transpose(0, 2, 1))   # (N, 32, nb)
    y = np.empty((n, blocks.shape[0]), np.float32)
    q8_product(CODE[kind], BYTES[kind], codes_t, d, s, np.ascontiguousarray(blocks), HALF_VALUES,
               y)
    return y
