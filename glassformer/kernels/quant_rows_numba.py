"""A few rows of x (2..16: serve's batched decode) times a block-quantized W, each block unpacked
once for all the rows.

    rows_t_product(x, kind, blocks, cols)    y = x @ W^T,  x (N, C) float32 -> y (N, R) float32

the same arguments and values as ops/quant/product.py's `rows_t_product` (the NumPy reference)
and kernels/quant_numba.py's one-row loops. Those loops take the rows of x one at a time inside
each group of four rows of W, so every row of x unpacks every block again: eight rows cost eight
times the unpacking, and the unpacking, not reading the bytes, is most of a product's time once
W's bytes are in cache. Here a tile of TILE rows of W is widened once into a float32 scratch
(TILE * C floats: 24 KiB at C = 1536, in L1), and every row of x takes its dot products with the
tile from there:

    for each tile of W's rows:            widen (exact: the reference's floats, bit for bit)
        for each pair of rows of x:       2 x TILE dot products over C (x loaded once per pair)

so the unpacking is paid once per weight whatever N is, and the dots are plain float32 FMAs
(fastmath: summed in SIMD order, not BLAS's, so the results agree with the reference to float32
rounding, not bit for bit; tests/kernels/test_quant_rows_kernels.py states the tolerance).

Formats: Q8_0, Q4_0 and Q4_1 (SmolLM2's files: Q4_1 layers, a Q8_0 tied head). Q5_0 and Q4_K
already widen one row of W for all rows of x in quant_numba.py, which keeps them.

Threads: with numba's thread count above one, the tiles are split into one run per thread
(`prange`), each with its own scratch.

Imported only through kernels/choice.py (`quant_rows_kernels`); ops/quant/matrix.py asks for it
for 2..COMPILED_ROWS float32 rows.
"""
from __future__ import annotations

import numba
import numpy as np

from glassformer.kernels.quant_numba import HALF_VALUES, _half

FAST = {"reassoc", "contract", "arcp"}   # the dots: reorder sums (SIMD), fuse multiply-adds
jit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy")
pjit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy", parallel=True)
exact = numba.njit(cache=True, nogil=True, error_model="numpy")   # the widening: gguf's roundings
TILE = 4                  # rows of W widened at a time
MIN_THREADED_ROWS = 64    # a W with fewer rows is not worth waking a second thread for
SIZES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}   # bytes a block of 32 weights
KINDS = tuple(SIZES)


@exact
def _widen(blocks, halves, r, size, w):
    """Rows r..r+TILE-1 of W (the last repeated past W's end) -> w (TILE, C) float32: Q8_0
    (size 34) d * q; Q4_0 (18) d * (q - 8); Q4_1 (20) (d * q) + m. q: byte j's low nibble for
    weight j, its high nibble for j + 16. note: the inner loops run to `half`, read from the
    shape: a constant 16 gets unrolled to scalar code, a run-time bound vectorized."""
    nb = w.shape[1] // 32
    last = blocks.shape[0] - 1
    head = 2 if size == 34 else size - 16                                # bytes before the codes
    half = (blocks.shape[1] // nb - head) // (2 if size == 34 else 1)    # 16
    for t in range(w.shape[0]):
        row = blocks[min(r + t, last)]
        for b in range(nb):
            at, o, d = b * size + head, b * 32, _half(halves, row, b * size)
            if size == 34:
                for j in range(2 * half):
                    w[t, o + j] = d * np.float32(np.int8(row[at + j]))  # uint8 read as int8
            elif size == 20:
                m = _half(halves, row, b * size + 2)
                for j in range(half):
                    w[t, o + j] = d * np.float32(row[at + j] & 15) + m
                    w[t, o + 16 + j] = d * np.float32(row[at + j] >> 4) + m
            else:
                for j in range(half):
                    w[t, o + j] = d * np.float32(np.int32(row[at + j] & 15) - 8)
                    w[t, o + 16 + j] = d * np.float32(np.int32(row[at + j] >> 4) - 8)


@jit
def _tile_dots(x, w, y, r):
    """y[:, r..r+3] = x (N, C) @ w (4, C)^T, two rows of x at a time (each w value loaded once
    for two rows, each x value once for four); columns past y's end are not written. An odd
    last row is paired with itself, so every row's sums take the same instructions whatever
    N is and wherever the row sits (serve --batch-invariant keeps a row's bits)."""
    n, cols = x.shape
    rows = y.shape[1]
    w0, w1, w2, w3 = w[0], w[1], w[2], w[3]
    for i in range(0, n, 2):
        a, b = x[i], x[min(i + 1, n - 1)]
        a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
        for c in range(cols):
            u, v = a[c], b[c]
            a0 += w0[c] * u
            a1 += w1[c] * u
            a2 += w2[c] * u
            a3 += w3[c] * u
            b0 += w0[c] * v
            b1 += w1[c] * v
            b2 += w2[c] * v
            b3 += w3[c] * v
        _put(y, i, r, rows, a0, a1, a2, a3)
        if i + 1 < n:
            _put(y, i + 1, r, rows, b0, b1, b2, b3)


@jit
def _put(y, i, r, rows, t0, t1, t2, t3):
    """y[i, r..r+3] = t0..t3, stopping at y's last column."""
    y[i, r] = t0
    if r + 1 < rows:
        y[i, r + 1] = t1
    if r + 2 < rows:
        y[i, r + 2] = t2
    if r + 3 < rows:
        y[i, r + 3] = t3


@jit
def _run(x, blocks, halves, y, size, first, stop):
    """Tiles first..stop-1 of W: widened one at a time into one scratch, dotted with all of x."""
    w = np.empty((TILE, x.shape[1]), np.float32)                         # (4, C): in L1
    for g in range(first, stop):
        _widen(blocks, halves, g * TILE, size, w)
        _tile_dots(x, w, y, g * TILE)


@jit
def product(x, blocks, halves, y, size):
    """y (N, R) = x (N, C) @ W^T, W's rows blocks of `size` bytes (R, C / 32 * size)."""
    _run(x, blocks, halves, y, size, 0, (blocks.shape[0] + TILE - 1) // TILE)


@pjit
def product_threads(x, blocks, halves, y, size, parts):
    """product with the tiles split into `parts` runs, one a thread, each its own scratch."""
    tiles = (blocks.shape[0] + TILE - 1) // TILE
    for p in numba.prange(parts):
        _run(x, blocks, halves, y, size, p * tiles // parts, (p + 1) * tiles // parts)


def rows_t_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """ops/quant/product.rows_t_product's twin for kind in KINDS: x (N, C) float32 @ W^T -> y
    (N, R) float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    blocks = np.ascontiguousarray(blocks)
    y = np.empty((x.shape[0], blocks.shape[0]), np.float32)             # (N, R)
    threads = numba.get_num_threads()
    if blocks.shape[0] >= MIN_THREADED_ROWS and threads > 1:
        product_threads(x, blocks, HALF_VALUES, y, SIZES[kind], threads)
    else:
        product(x, blocks, HALF_VALUES, y, SIZES[kind])
    return y
