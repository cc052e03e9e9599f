"""Many rows times a block-quantized W (a prefill, an eval batch, the backward's dy @ W): the
slabs of ops/quant/product.py, widened by compiled loops instead of NumPy's.

    rows_t_product(x, kind, blocks, cols)   y  = x @ W^T    x (N, C) -> (N, R)
    rows_product(dy, kind, blocks, cols)    dx = dy @ W     dy (N, R) -> (N, C)

With hundreds of rows of x a product is BLAS's work (each widened weight is used N times), so
the slab walk stays product.py's own (`widen=`: one slab of W widened into one scratch, then one
BLAS call). What changes is the widening: NumPy's takes five passes and two temporaries a slab
(nibbles unpacked, stacked, cast, scaled, shifted: 35% of a 256-token prefill's products,
measured in docs/performance.md); here it is one compiled pass over the blocks.

The widened values equal ops/quant/product.py's `dequantize_rows` bit for bit (no fastmath: Q4_1's
d * q is rounded before + m, as gguf's dequantize does), so the products equal the reference's
exactly: the same BLAS call on the same floats. Q8_0, Q4_0 and Q4_1 are compiled; Q5_0 and Q4_K
widen with the reference's NumPy (`widen_rows` hands them on).

Imported only through kernels/choice.py (`quant_kernels`), like quant_numba.py.
"""
from __future__ import annotations

import numba
import numpy as np

from glassformer.kernels.quant_numba import HALF_VALUES, _half
from glassformer.ops.quant import product

exact = numba.njit(cache=True, nogil=True, error_model="numpy")   # no fastmath: gguf's roundings


@exact
def widen_q8_0(blocks, halves, out):
    """blocks (R, C / 32 * 34) -> out (R, C): d * q, q the int8 code."""
    nb = out.shape[1] // 32
    for r in range(blocks.shape[0]):
        row = blocks[r]
        for b in range(nb):
            d, at, o = _half(halves, row, b * 34), b * 34 + 2, b * 32
            for j in range(32):
                out[r, o + j] = d * np.float32(np.int8(row[at + j]))


@exact
def widen_q4(blocks, halves, out, size, minimum):
    """blocks (R, C / 32 * size) -> out (R, C): Q4_1 (size 20, `minimum`): (d * q) + m, or
    Q4_0 (size 18): d * (q - 8); q the low nibble of byte j for weight j, the high for j + 16."""
    nb, head = out.shape[1] // 32, size - 16
    for r in range(blocks.shape[0]):
        row = blocks[r]
        for b in range(nb):
            at, o, d = b * size + head, b * 32, _half(halves, row, b * size)
            if minimum:
                m = _half(halves, row, b * size + 2)
                for j in range(16):
                    code = row[at + j]
                    out[r, o + j] = d * np.float32(code & 15) + m
                    out[r, o + 16 + j] = d * np.float32(code >> 4) + m
            else:
                for j in range(16):
                    code = row[at + j]
                    out[r, o + j] = d * np.float32(np.int32(code & 15) - 8)
                    out[r, o + 16 + j] = d * np.float32(np.int32(code >> 4) - 8)


def widen_rows(kind: str, blocks: np.ndarray, cols: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """product.dequantize_rows' twin: blocks (R, row bytes) -> W (R, C) float32, into `out`."""
    if kind not in ("q8_0", "q4_0", "q4_1"):
        return product.dequantize_rows(kind, blocks, cols, out=out)
    if out is None:
        out = np.empty((blocks.shape[0], cols), np.float32)
    blocks = np.ascontiguousarray(blocks)
    if kind == "q8_0":
        widen_q8_0(blocks, HALF_VALUES, out)
    else:
        widen_q4(blocks, HALF_VALUES, out, 20 if kind == "q4_1" else 18, kind == "q4_1")
    return out


def rows_t_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """product.rows_t_product with compiled widening: x (N, C) @ W^T -> (N, R)."""
    return product.rows_t_product(x, kind, blocks, cols, widen=widen_rows)


def rows_product(dy: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """product.rows_product with compiled widening: dy (N, R) @ W -> (N, C)."""
    return product.rows_product(dy, kind, blocks, cols, widen=widen_rows)
