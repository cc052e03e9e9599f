"""Products with a block-quantized W as numba loops that read the blocks directly (no widened W).

    rows_t_product(x, kind, blocks, cols)    y = x @ W^T,  x (N, C) float32 -> y (N, R) float32

the compiled twin of ops/quant/product.py's `rows_t_product` (the NumPy reference: it widens a
slab of W's rows with NumPy, then calls BLAS), with the same arguments. A decoded token multiplies
1..16 rows of x by every weight, so reading the weight's bytes is the cost. For Q5_0 and Q4_K
each row of W is read once from its blocks and widened into a C-float scratch that stays in L1
(never the whole W, never a slab), in one vectorized loop per block:

    q5_0               w = d * (q - 16)
    q4_k               w = (d * sc) * q - (dmin * m)        per sub-block of 32

and every row of x takes its dot product with that row (`_dots`). The widened values are the
reference's (fastmath may fuse d * q + m into one rounding), the sums are float32 in another order
than BLAS's, so the two paths agree to float32 rounding (tests/kernels/test_quant_kernels.py
states the tolerance), not bit for bit. A float16 scale is read exactly from a table (`_half`).

Q8_0, Q4_0 and Q4_1 (the formats of SmolLM2's files) skip the widened row: their weights are
affine in the codes, so a block's share of a dot product is

    q8_0   d * sum_j q_j x_j            q4_0   d * (sum_j q_j x_j - 8 * S)
    q4_1   d * sum_j q_j x_j + m * S    S = sum_j x_j over the block, once per row of x

and four rows of W are read together, each x value loaded once for the four (`_four_*`): no
store and reload of a widened row (15-25% less CPU time than widening first with W in L2;
docs/performance.md, issue 44's qshare section).

Threads: with numba's thread count above one (kernels/choice.py sets it to BLAS's count when it
imports this module; glassformer.blas.blas_threads keeps the two together), the groups of four
rows are split over the threads (`prange`, the `*_threads` twins). On 2 cores shared with other
programs the threads wait on each other (as OpenBLAS's do: blas.py), which is why the CLI's
free-core rule sizes both to the idle cores.

Imported only through kernels/choice.py (`quant_kernels`), which sets numba's cache folder first;
compiled on the first call of each format and cached on disk (cache=True).
"""
from __future__ import annotations

import numba
import numpy as np

FAST = {"reassoc", "contract", "arcp"}   # reorder sums (SIMD), fuse multiply-adds; keep inf/NaN
jit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy")
pjit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy", parallel=True)
MIN_THREADED_ROWS = 64   # a W with fewer rows is not worth waking a second thread for


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
def _block_sums(x):
    """S (N, C / 32): each 32-wide block of each row of x summed (the minimum's and centre's
    share of a block's dot product)."""
    nb = x.shape[1] // 32
    sums = np.empty((x.shape[0], nb), np.float32)
    for i in range(x.shape[0]):
        for b in range(nb):
            total = np.float32(0.0)
            for j in range(32):
                total += x[i, b * 32 + j]
            sums[i, b] = total
    return sums


@jit
def _four(blocks, r):
    """Rows r..r+3 of W (the last repeated past its end: a tail group writes it twice, alike)."""
    last = blocks.shape[0] - 1
    return (r, min(r + 1, last), min(r + 2, last), min(r + 3, last))


@jit
def _four_q8_0(x, blocks, halves, y, r):
    """y[:, r..r+3] for Q8_0 rows of W: d * sum_j q_j x_j per block."""
    r0, r1, r2, r3 = _four(blocks, r)
    w0, w1, w2, w3 = blocks[r0], blocks[r1], blocks[r2], blocks[r3]
    nb = x.shape[1] // 32
    width = blocks.shape[1] // nb - 2                                    # 32 codes a block
    for i in range(x.shape[0]):
        t0 = t1 = t2 = t3 = np.float32(0.0)
        for b in range(nb):
            at, o = b * 34 + 2, b * 32
            s0 = s1 = s2 = s3 = np.float32(0.0)
            for j in range(width):
                v = x[i, o + j]
                s0 += np.float32(np.int8(w0[at + j])) * v               # uint8 read as int8
                s1 += np.float32(np.int8(w1[at + j])) * v
                s2 += np.float32(np.int8(w2[at + j])) * v
                s3 += np.float32(np.int8(w3[at + j])) * v
            t0 += _half(halves, w0, at - 2) * s0
            t1 += _half(halves, w1, at - 2) * s1
            t2 += _half(halves, w2, at - 2) * s2
            t3 += _half(halves, w3, at - 2) * s3
        y[i, r0], y[i, r1], y[i, r2], y[i, r3] = t0, t1, t2, t3


@jit
def _four_q4(x, sums, blocks, halves, y, r, size, minimum):
    """y[:, r..r+3] for Q4_0 (size 18: d * (sum q x - 8 S)) or Q4_1 (size 20, `minimum`:
    d * sum q x + m * S) rows of W."""
    r0, r1, r2, r3 = _four(blocks, r)
    w0, w1, w2, w3 = blocks[r0], blocks[r1], blocks[r2], blocks[r3]
    nb = x.shape[1] // 32
    head = size - 16                                                     # 2 or 4 bytes of scales
    half = blocks.shape[1] // nb - head                                  # 16 bytes of codes
    for i in range(x.shape[0]):
        t0 = t1 = t2 = t3 = np.float32(0.0)
        for b in range(nb):
            at, o, s = b * size + head, b * 32, sums[i, b]
            s0 = s1 = s2 = s3 = np.float32(0.0)
            for j in range(half):
                lo, hi = x[i, o + j], x[i, o + 16 + j]
                c0, c1 = np.float32(w0[at + j]), np.float32(w1[at + j])
                c2, c3 = np.float32(w2[at + j]), np.float32(w3[at + j])
                h0, h1 = np.floor(c0 * np.float32(0.0625)), np.floor(c1 * np.float32(0.0625))
                h2, h3 = np.floor(c2 * np.float32(0.0625)), np.floor(c3 * np.float32(0.0625))
                s0 += (c0 - np.float32(16.0) * h0) * lo + h0 * hi
                s1 += (c1 - np.float32(16.0) * h1) * lo + h1 * hi
                s2 += (c2 - np.float32(16.0) * h2) * lo + h2 * hi
                s3 += (c3 - np.float32(16.0) * h3) * lo + h3 * hi
            at = b * size
            if minimum:
                t0 += _half(halves, w0, at) * s0 + _half(halves, w0, at + 2) * s
                t1 += _half(halves, w1, at) * s1 + _half(halves, w1, at + 2) * s
                t2 += _half(halves, w2, at) * s2 + _half(halves, w2, at + 2) * s
                t3 += _half(halves, w3, at) * s3 + _half(halves, w3, at + 2) * s
            else:
                centre = np.float32(8.0) * s
                t0 += _half(halves, w0, at) * (s0 - centre)
                t1 += _half(halves, w1, at) * (s1 - centre)
                t2 += _half(halves, w2, at) * (s2 - centre)
                t3 += _half(halves, w3, at) * (s3 - centre)
        y[i, r0], y[i, r1], y[i, r2], y[i, r3] = t0, t1, t2, t3


# The drivers: each group of four rows of W on one thread; the `_threads` twins split the groups.

@jit
def q8_0_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q8_0 blocks (R, C / 32 * 34)."""
    for g in range((blocks.shape[0] + 3) // 4):
        _four_q8_0(x, blocks, halves, y, 4 * g)


@pjit
def q8_0_product_threads(x, blocks, halves, y):
    for g in numba.prange((blocks.shape[0] + 3) // 4):
        _four_q8_0(x, blocks, halves, y, 4 * g)


@jit
def q4_0_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q4_0 blocks (R, C / 32 * 18)."""
    sums = _block_sums(x)
    for g in range((blocks.shape[0] + 3) // 4):
        _four_q4(x, sums, blocks, halves, y, 4 * g, 18, False)


@pjit
def q4_0_product_threads(x, blocks, halves, y):
    sums = _block_sums(x)
    for g in numba.prange((blocks.shape[0] + 3) // 4):
        _four_q4(x, sums, blocks, halves, y, 4 * g, 18, False)


@jit
def q4_1_product(x, blocks, halves, y):
    """y (N, R) = x (N, C) @ W^T, W's rows Q4_1 blocks (R, C / 32 * 20)."""
    sums = _block_sums(x)
    for g in range((blocks.shape[0] + 3) // 4):
        _four_q4(x, sums, blocks, halves, y, 4 * g, 20, True)


@pjit
def q4_1_product_threads(x, blocks, halves, y):
    sums = _block_sums(x)
    for g in numba.prange((blocks.shape[0] + 3) // 4):
        _four_q4(x, sums, blocks, halves, y, 4 * g, 20, True)


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
THREADED = {"q8_0": q8_0_product_threads, "q4_0": q4_0_product_threads,
            "q4_1": q4_1_product_threads}


def rows_t_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """ops/quant/product.rows_t_product's twin: x (N, C) float32 @ W^T -> y (N, R) float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty((x.shape[0], blocks.shape[0]), np.float32)             # (N, R)
    product = PRODUCTS[kind]
    if blocks.shape[0] >= MIN_THREADED_ROWS and kind in THREADED and numba.get_num_threads() > 1:
        product = THREADED[kind]
    product(x, np.ascontiguousarray(blocks), HALF_VALUES, y)
    return y
