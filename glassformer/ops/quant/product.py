"""Products with a block-quantized matrix W (R, C) that never widen all of W to float32.

W is stored as GGUF blocks along each of its R rows (a linear weight's rows are its outputs,
nn.Linear's (out, in); the token embedding's rows are tokens). Two products are needed:

    rows_t_product   y  = x @ W^T     x (N, C) -> (N, R)    a projection; the tied LM head
    rows_product     dx = dy @ W      dy (N, R) -> (N, C)   its backward for the input

Both walk W a slab of rows at a time: the slab is dequantized into one scratch array allocated per
call and multiplied by BLAS. A slab is SLAB_BYTES of float32 (about a core's L2 cache, so the
widened slab is read back from cache by the product), or as many rows of W as x has rows when
that is more: each slab's product reads all of x again, so with thousands of rows (a prefill, an
eval batch) small slabs would read x hundreds of times. Peak extra memory is one slab, never the
whole W (and never more than the larger of SLAB_BYTES and x's own bytes, in float32).
Measured in docs/performance.md against widening W whole; a compiled twin (fused dequantize and
dot on the blocks) can replace these two functions with the same arguments.

`dequantize_rows` is the one place a format's blocks are widened for the products.
"""
from __future__ import annotations

import numpy as np

from glassformer.ops.quant.formats import format_of

SLAB_BYTES = 1 << 18     # float32 scratch of one slab: 256 KiB


def dequantize_rows(kind: str, blocks: np.ndarray, cols: int,
                    out: np.ndarray | None = None) -> np.ndarray:
    """blocks (R, C / BLOCK * BYTES) uint8 of format `kind` -> W (R, C) float32, into `out`
    (a C-contiguous (R, C) float32 array) when given."""
    fmt = format_of(kind)
    rows = blocks.shape[0]
    flat_out = None if out is None else out.reshape(-1, fmt.BLOCK)      # a view: out is contiguous
    values = fmt.dequantize(blocks.reshape(-1, fmt.BYTES), out=flat_out)  # (R * C / BLOCK, BLOCK)
    return values.reshape(rows, cols)


def slab_rows(cols: int, n: int = 1) -> int:
    """Rows of W dequantized at a time for an x of n rows: SLAB_BYTES of float32, or n rows when
    more (x is read once per slab), at least one row."""
    return max(1, SLAB_BYTES // (4 * cols), n)


def rows_t_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int,
                   widen=dequantize_rows) -> np.ndarray:
    """y = x @ W^T for x (N, C) and W (R, C) stored as `blocks` -> y (N, R), dtype of x and
    float32's result type. `widen`: dequantize_rows, or a twin with its arguments and values
    (kernels/quant_slabs.py's compiled one)."""
    rows = blocks.shape[0]
    out_dtype = np.result_type(x.dtype, np.float32)
    y = np.empty((x.shape[0], rows), out_dtype)                         # (N, R)
    step = slab_rows(cols, x.shape[0])
    scratch = np.empty((min(step, rows), cols), np.float32)             # one slab of W
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        w = widen(kind, blocks[start:stop], cols, out=scratch[:stop - start])
        np.matmul(x, w.T, out=y[:, start:stop])                         # (N, C) @ (C, r) -> (N, r)
    return y


def rows_product(dy: np.ndarray, kind: str, blocks: np.ndarray, cols: int,
                 widen=dequantize_rows) -> np.ndarray:
    """dx = dy @ W for dy (N, R) and W (R, C) stored as `blocks` -> dx (N, C): each slab of
    rows adds its share, dy[:, slab] @ W[slab]. `widen` as for rows_t_product."""
    rows = blocks.shape[0]
    dx = np.zeros((dy.shape[0], cols), np.result_type(dy.dtype, np.float32))   # (N, C)
    step = slab_rows(cols, dy.shape[0])
    scratch = np.empty((min(step, rows), cols), np.float32)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        w = widen(kind, blocks[start:stop], cols, out=scratch[:stop - start])
        dx += dy[:, start:stop] @ w                                     # (N, r) @ (r, C) -> (N, C)
    return dx
