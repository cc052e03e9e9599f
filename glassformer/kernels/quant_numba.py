"""Products with a block-quantized W as numba loops that read the blocks directly (no widened W).

    rows_t_product(x, kind, blocks, cols)    y = x @ W^T,  x (N, C) float32 -> y (N, R) float32

the compiled twin of ops/quant/product.py's `rows_t_product` (the NumPy reference: it widens a
slab of W's rows with NumPy, then calls BLAS), with the same arguments. A decoded token multiplies
1..16 rows of x by every weight, so reading the weight's bytes is the cost. Here each row of W is
read once from its blocks and widened into a C-float scratch that stays in L1 (never the whole W,
never a slab), in one vectorized loop per block:

    q8_0, q4_0, q5_0   w = d * (q - centre)                 (centre 0, 8, 16)
    q4_1               w = d * q + m
    q4_k               w = (d * sc) * q - (dmin * m)        per sub-block of 32

and every row of x takes its dot product with that row (`_dots`). The widened values are the
reference's (fastmath may fuse d * q + m into one rounding), the sums are float32 in another order
than BLAS's, so the two paths agree to float32 rounding (tests/kernels/test_quant_kernels.py
states the tolerance), not bit for bit. A float16 scale is read exactly from a table (`_half`).

One thread: on 2 shared cores numba's parallel loops measured 10-20x slower under load (its
threads wait on each other, as OpenBLAS's do: blas.py), and a decode step is one product at a time.

Imported only through kernels/choice.py (`quant_kernels`), which sets numba's cache folder first;
compiled on the first call of each format and cached on disk (cache=True).
"""
from __future__ import annotations

import numba
import numpy as np

FAST = {"reassoc", "contract", "arcp"}   # reorder sums (SIMD), fuse multiply-adds; keep inf/NaN
jit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy")


# every float16 bit pattern's value as float32 (NumPy's exact conversion), 256 KiB: a scale is
# one lookup (numba has no float16 loads; decoding the bits by hand measured 2.5x slower)
HALF_VALUES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(
    np.float32)


@jit
def _half(halves, row, at):
    """The float16 stored little-endian at row[at], row[at + 1], as float32."""
    return halves[np.int64(row[at]) | (np.int64(row[at + 1]) << 8)]


@jit
def _dots(x, wrow, y, r):
    """y[i, r] = sum(x[i] * wrow) for every row i of x: one widened row of W, in L1."""
    for i in range(x.shape[0]):
        total = np.float32(0.0)
        for c in range(x.shape[1]):
            total += wrow[c] * x[i, c]
        y[i, r] = total


# Each product below widens one row of W at a time into `wrow` (C floats, in L1) and takes every
# row of x's dot product with it. note: the inner loops run to `half` (or `sub`), read from the
# blocks' shape rather than written 16 or 32: a constant trip count lets LLVM unroll the loop
# into scalar code; a run-time one gets it vectorized (4x faster, measured).

@jit
def q8_0_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q8_0 blocks (R, C / 32 * 34)."""
    rows, nb = blocks.shape[0], x.shape[1] // 32
    width = blocks.shape[1] // nb - 2                                    # 32 codes a block
    wrow = np.empty(x.shape[1], np.float32)
    for r in range(rows):
        row = blocks[r]
        for b in range(nb):
            at, o, scale = b * 34 + 2, b * 32, _half(halves, row, b * 34)
            for j in range(width):
                code = np.float32(row[at + j])                       # int8 stored as uint8
                wrow[o + j] = scale * (code - np.float32(256.0) if code >= 128 else code)
        _dots(x, wrow, y, r)


@jit
def q4_0_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q4_0 blocks (R, C / 32 * 18)."""
    rows, nb = blocks.shape[0], x.shape[1] // 32
    half = blocks.shape[1] // nb - 2                                     # 16 bytes of codes
    wrow = np.empty(x.shape[1], np.float32)
    for r in range(rows):
        row = blocks[r]
        for b in range(nb):
            at, o, scale = b * 18 + 2, b * 32, _half(halves, row, b * 18)
            for j in range(half):
                code = np.float32(row[at + j])
                high = np.floor(code * np.float32(0.0625))           # byte >> 4
                wrow[o + j] = scale * (code - np.float32(16.0) * high - np.float32(8.0))
                wrow[o + 16 + j] = scale * (high - np.float32(8.0))
        _dots(x, wrow, y, r)


@jit
def q4_1_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q4_1 blocks (R, C / 32 * 20)."""
    rows, nb = blocks.shape[0], x.shape[1] // 32
    half = blocks.shape[1] // nb - 4                                     # 16 bytes of codes
    wrow = np.empty(x.shape[1], np.float32)
    for r in range(rows):
        row = blocks[r]
        for b in range(nb):
            at, o = b * 20 + 4, b * 32
            scale, low = _half(halves, row, b * 20), _half(halves, row, b * 20 + 2)
            for j in range(half):
                code = np.float32(row[at + j])
                high = np.floor(code * np.float32(0.0625))
                wrow[o + j] = scale * (code - np.float32(16.0) * high) + low
                wrow[o + 16 + j] = scale * high + low
        _dots(x, wrow, y, r)


@jit
def q5_0_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q5_0 blocks (R, C / 32 * 22)."""
    rows, nb = blocks.shape[0], x.shape[1] // 32
    half = blocks.shape[1] // nb - 6                                     # 16 bytes of codes
    wrow = np.empty(x.shape[1], np.float32)
    for r in range(rows):
        row = blocks[r]
        for b in range(nb):
            at, o, scale = b * 22, b * 32, _half(halves, row, b * 22)
            top = (np.int64(row[at + 2]) | (np.int64(row[at + 3]) << 8)
                   | (np.int64(row[at + 4]) << 16) | (np.int64(row[at + 5]) << 24))
            for j in range(half):
                code = np.float32(row[at + 6 + j])
                high = np.floor(code * np.float32(0.0625))
                low_top = np.float32((top >> j) & 1) * np.float32(16.0)
                high_top = np.float32((top >> (j + 16)) & 1) * np.float32(16.0)
                wrow[o + j] = scale * (code - np.float32(16.0) * high + low_top
                                       - np.float32(16.0))
                wrow[o + 16 + j] = scale * (high + high_top - np.float32(16.0))
        _dots(x, wrow, y, r)


@jit
def q4_k_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q4_K super-blocks (R, C / 256 * 144)."""
    rows, nb = blocks.shape[0], x.shape[1] // 256
    sub = (blocks.shape[1] // nb - 16) // 4                              # 32 bytes a pair
    wrow = np.empty(x.shape[1], np.float32)
    step, floor = np.empty(8, np.float32), np.empty(8, np.float32)
    for r in range(rows):
        row = blocks[r]
        for b in range(nb):
            at = b * 144
            d, dmin = _half(halves, row, at), _half(halves, row, at + 2)
            for j in range(4):    # the 6-bit scales and minimums (q4_k.scales_and_mins)
                low, mid = np.int64(row[at + 4 + j]), np.int64(row[at + 8 + j])
                top = np.int64(row[at + 12 + j])
                step[j] = d * np.float32(low & 0x3F)
                floor[j] = dmin * np.float32(mid & 0x3F)
                step[j + 4] = d * np.float32((top & 0x0F) | ((low >> 2) & 0x30))
                floor[j + 4] = dmin * np.float32((top >> 4) | ((mid >> 2) & 0x30))
            for pair in range(4):
                base, o = at + 16 + pair * 32, b * 256 + pair * 64
                s0, f0 = step[2 * pair], floor[2 * pair]
                s1, f1 = step[2 * pair + 1], floor[2 * pair + 1]
                for j in range(sub):
                    code = np.float32(row[base + j])
                    high = np.floor(code * np.float32(0.0625))
                    wrow[o + j] = s0 * (code - np.float32(16.0) * high) - f0
                    wrow[o + 32 + j] = s1 * high - f1
        _dots(x, wrow, y, r)


PRODUCTS = {"q8_0": q8_0_product, "q4_0": q4_0_product, "q4_1": q4_1_product,
            "q5_0": q5_0_product, "q4_k": q4_k_product}


def rows_t_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """ops/quant/product.rows_t_product's twin: x (N, C) float32 @ W^T -> y (N, R) float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty((x.shape[0], blocks.shape[0]), np.float32)             # (N, R)
    PRODUCTS[kind](x, np.ascontiguousarray(blocks), HALF_VALUES, y)
    return y
