"""QuantizedMatrix: a weight kept as GGUF blocks, usable where a float32 weight is.

    QuantizedMatrix(kind="q4_1", blocks=(R, C/32*20) uint8, cols=C, transposed=...)

The stored matrix W is (R, C), blocks running along each row (GGUF's layout: a linear weight is
stored (out, in), the embedding (V, C)). glassformer multiplies inputs by (in, out) weights, so a
linear weight is the record with `transposed=True`: it stands for W^T, shape (C, R).

What a float32 weight does, the record does too, reading the blocks:

    x @ M          M = W^T: rows_t_product (x @ W^T);  M = W: rows_product (x @ W)
    M.T            the same blocks, `transposed` flipped (no copy)
    M[ids]         rows of W (not transposed) dequantized: an embedding lookup
    M.shape, M.ndim, M.dtype (float32: what its products give), M.size, M.nbytes (the blocks')

so ops/linear.py, the tied LM head and an embedding lookup run unchanged; `x @ M` reaches
`__rmatmul__` because NumPy defers to an operand that sets `__array_ufunc__ = None`.
Anything else (arithmetic, np.asarray) is refused: `dequantize()` first, on purpose.

A few float32 rows times W^T (a decode step) run on kernels/quant_numba.py's compiled twin when
GLASSFORMER_KERNELS selects numba (`COMPILED_ROWS`), 2..COMPILED_ROWS rows of Q8_0, Q4_0 and
Q4_1 (serve's batched decode) on kernels/quant_rows_numba.py's, which unpack each block once for
all the rows; more float32 rows (a prefill) and the backward run product.py's slabs with
kernels/quant_slabs.py's compiled widening (the same floats, so the same products). product.py
stays the reference.

`activations="q8"` (opt-in: `--activation-quant q8`, `load_pretrained(activations="q8")`) makes
x @ W^T round x to 8-bit blocks first and take integer block products, as llama.cpp's CPU backend
does (activations_q8.py; compiled twin kernels/q8_numba.py): its logits, not the float32 product
of the same blocks. The backward's dy @ W stays float32 (the rounding passed straight through).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.kernels.choice import (q8_kernels, quant_kernels, quant_rows_kernels,
                                        quant_slab_kernels)
from glassformer.ops.quant.activations_q8 import activation_product
from glassformer.ops.quant.formats import format_of
from glassformer.ops.quant.product import dequantize_rows, rows_product, rows_t_product

COMPILED_ROWS = 16   # x @ W^T with at most this many float32 rows runs compiled (a decode step:
#                      kernels/quant_numba.py) when kernels/choice.py says so; more float32 rows
#                      and the backward's dy @ W run product.py's slabs and BLAS, widened by
#                      kernels/quant_slabs.py (the same floats); float64 stays on product.py
ACTIVATIONS = ("float32", "q8")   # how x is multiplied by W^T: as it is, or rounded to 8 bits


@dataclass(frozen=True, eq=False)
class QuantizedMatrix:
    """A block-quantized matrix (module docstring). kind: "q8_0", "q4_0", "q4_1" or "q4_k"."""
    kind: str
    blocks: np.ndarray       # (R, C / BLOCK * BYTES) uint8: row r's blocks, in order
    cols: int                # C, weights a stored row
    transposed: bool = False  # stands for W^T (C, R): a linear weight in (in, out) layout
    activations: str = "float32"  # "q8": x @ W^T rounds x to 8-bit blocks first (llama.cpp's way)

    __array_ufunc__ = None   # NumPy hands `x @ M` to __rmatmul__ instead of converting M

    @property
    def stored_shape(self) -> tuple[int, int]:
        return (self.blocks.shape[0], self.cols)                        # (R, C)

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.stored_shape
        return (cols, rows) if self.transposed else (rows, cols)

    ndim = 2
    dtype = np.dtype(np.float32)

    @property
    def size(self) -> int:
        return self.stored_shape[0] * self.cols

    @property
    def nbytes(self) -> int:
        return self.blocks.nbytes

    @property
    def T(self) -> "QuantizedMatrix":
        return QuantizedMatrix(self.kind, self.blocks, self.cols, not self.transposed,
                               self.activations)

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:
        """x (..., shape[0]) @ self -> (..., shape[1])."""
        c_in, c_out = self.shape
        if x.shape[-1] != c_in:
            raise GlassformerError(f"cannot multiply x of shape {x.shape} by a quantized "
                                   f"matrix of shape {self.shape}")
        rows = x.reshape(-1, c_in)                                      # (..., in) -> (N, in)
        product = rows_t_product if self.transposed else rows_product
        if self.transposed and self.activations == "q8":
            product = self._q8_product()
        elif self.transposed and rows.shape[0] <= COMPILED_ROWS and rows.dtype == np.float32:
            compiled = self._few_rows_product(rows.shape[0])
            if compiled is not None:
                product = compiled
        elif rows.dtype == np.float32:
            slabs = quant_slab_kernels()   # many rows: product.py's slabs, compiled widening
            if slabs is not None:
                product = slabs.rows_t_product if self.transposed else slabs.rows_product
        y = product(rows, self.kind, self.blocks, self.cols)            # (N, out)
        return y.reshape(x.shape[:-1] + (c_out,))

    def _few_rows_product(self, n: int):
        """The compiled x @ W^T for n <= COMPILED_ROWS float32 rows, or None (the reference): one
        row on quant_numba.py's loops, 2..COMPILED_ROWS (serve's batched decode) on
        quant_rows_numba.py's, which unpack each block once for all the rows (the one place the
        compiled products are chosen)."""
        if n >= 2:
            several = quant_rows_kernels()
            if several is not None and self.kind in several.KINDS:
                return several.rows_t_product
        compiled = quant_kernels()
        return None if compiled is None else compiled.rows_t_product

    def _q8_product(self):
        """llama.cpp's 8-bit activation product for x (N, C): compiled for a format q8_numba.py
        has, any number of rows (its kernel equals the NumPy reference bit for bit, and a
        prefill on the reference's block-by-block matmuls takes minutes), else the reference."""
        compiled = q8_kernels()
        if compiled is not None and self.kind in compiled.KINDS:
            return compiled.activation_product
        return activation_product

    def __getitem__(self, ids) -> np.ndarray:
        """Rows of the stored W (an embedding lookup): ids (...) -> (..., C) float32."""
        if self.transposed:
            raise GlassformerError("row lookup of a transposed quantized matrix")
        ids = np.asarray(ids)
        picked = self.blocks[ids.reshape(-1)]                           # (N, row bytes)
        return dequantize_rows(self.kind, picked, self.cols).reshape(ids.shape + (self.cols,))

    def first_rows(self, n: int) -> "QuantizedMatrix":
        """The first n stored rows (R -> n), no copy: for a look at a few values of a large W."""
        return QuantizedMatrix(self.kind, self.blocks[:n], self.cols, self.transposed,
                               self.activations)

    def dequantize(self) -> np.ndarray:
        """The whole matrix as float32, in the shape this record stands for."""
        w = dequantize_rows(self.kind, self.blocks, self.cols)          # (R, C)
        return w.T if self.transposed else w


def quantize_matrix(w: np.ndarray, kind: str, *, transposed: bool = False) -> QuantizedMatrix:
    """Stored W (R, C) float -> its QuantizedMatrix (C a multiple of the format's block).
    transposed=True gives the record standing for W^T (a linear weight from nn.Linear layout)."""
    fmt = format_of(kind)
    rows, cols = w.shape
    if cols % fmt.BLOCK:
        raise GlassformerError(f"cannot quantize a ({rows}, {cols}) matrix to {kind.upper()}: "
                               f"its rows of {cols} are not a multiple of the block, {fmt.BLOCK}")
    blocks = fmt.quantize(np.asarray(w, np.float32).reshape(-1, fmt.BLOCK))   # (R*C/B, BYTES)
    return QuantizedMatrix(kind.lower(), blocks.reshape(rows, -1), cols, transposed)


def quantize_weight(w: np.ndarray, kind: str) -> QuantizedMatrix:
    """A glassformer (in, out) weight -> the record of its (out, in) rows, transposed=True."""
    return quantize_matrix(np.ascontiguousarray(w.T), kind, transposed=True)


def with_activations(params: dict, activations: str) -> dict:
    """params with every QuantizedMatrix set to multiply its inputs as `activations` says
    ("float32" or "q8", ACTIVATIONS); other values as they are. A new dict, the blocks shared."""
    if activations not in ACTIVATIONS:
        raise GlassformerError(f"activation quantization {activations!r} is not one of "
                               f"{', '.join(ACTIVATIONS)}")
    return {name: replace(w, activations=activations) if isinstance(w, QuantizedMatrix) else w
            for name, w in params.items()}


def is_quantized(w) -> bool:
    return isinstance(w, QuantizedMatrix)


def as_array(w):
    """w as a float array: a QuantizedMatrix widened whole, anything else as it is (for readers
    that slice or reshape a weight: interpretability's unembedding and per-head output rows)."""
    return w.dequantize() if isinstance(w, QuantizedMatrix) else w
