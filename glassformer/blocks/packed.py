"""Weights packed side by side: several projections of the same input stored as column blocks of
one array, so that one product computes them all.

    wq (C, H*D) | wk (C, K*D) | wv (C, K*D)   ->   one (C, (H+2K) D) array, row-major;
                                                    wq, wk, wv are views of its column blocks

Decoding reads every weight once per token with matrix-vector products; one product over the
packed array reads x once and makes one BLAS call where three made three (figures:
docs/performance.md, issue 33). The params keep their names, shapes and values: only where the
numbers lie in memory changes, so training, saving and every other reader of a param dict see
the same model (a writer copies views to contiguous arrays: io/safetensors.py).

`pack_columns` builds the packed array and its views, once, when a model is loaded
(models/layout.py); `packed_whole` finds it again from the views, so a block can use the one
product when (and only when) its weights lie that way. It looks only at the arrays it is given:
a param replaced by a fresh array (an optimizer step, a merged adapter) is simply not packed any
more, and the block falls back to one product per weight, with the same numbers.

Weights kept in GGUF blocks (ops/quant/matrix.py's QuantizedMatrix, a W^T whose stored W is
(out, in)) pack too. Their blocks run along a row of W, the input dim, so the columns of W^T
side by side are W's rows one under the other: stacking whole rows of blocks, no block cut.

    wq^T (C, H*D) | wk^T | wv^T   ->   blocks (H*D + 2 K*D, row bytes) uint8, one array;
                                        wq, wk, wv are records over its consecutive rows

Only records of one kind (Q8_0, Q4_1, ...), one row length and one activation rule pack: a
Q4_K file may keep v or down in another format, and those stay one product each. The packed
record's product (x @ [wq | wk | wv], kernels/quant_numba.py for a few rows, product.py's slabs
for a prefill) is the three products' numbers side by side: each output is one row of W's dot x.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from glassformer.ops.quant.matrix import QuantizedMatrix


def pack_columns(parts: list) -> list:
    """Copy parts (..., N_i) side by side into one new row-major (..., sum N_i) array; returns
    views of its column blocks, in order, with the parts' values (the array is their `.base`).
    QuantizedMatrix parts (W^T records, `stackable`) -> records over one new blocks array.

    >>> a, b = pack_columns([np.ones((2, 1), np.float32), np.zeros((2, 2), np.float32)])
    >>> a.base.shape, a.base is b.base
    ((2, 3), True)
    """
    if isinstance(parts[0], QuantizedMatrix):
        return _stack_blocks(parts)
    widths = [part.shape[-1] for part in parts]
    whole = np.empty(parts[0].shape[:-1] + (sum(widths),), parts[0].dtype)  # (..., sum N_i)
    views, start = [], 0
    for part, width in zip(parts, widths):
        view = whole[..., start:start + width]                              # (..., N_i), a view
        view[...] = part
        views.append(view)
        start += width
    return views


def packed_whole(parts: list) -> np.ndarray | QuantizedMatrix | None:
    """The row-major array whose consecutive column blocks the parts are, in order, when they are
    views of one such array (pack_columns made them); None otherwise. For QuantizedMatrix
    parts: the one record over their stacked blocks (a (C, sum R_i) W^T), or None.

    >>> a, b = pack_columns([np.ones((2, 1), np.float32), np.zeros((2, 2), np.float32)])
    >>> packed_whole([a, b]).shape, packed_whole([b, a])
    ((2, 3), None)
    """
    if isinstance(parts[0], QuantizedMatrix):
        return _stacked_whole(parts)
    whole = getattr(parts[0], "base", None)
    if not isinstance(whole, np.ndarray) or not whole.flags.c_contiguous:
        return None
    width = sum(part.shape[-1] for part in parts)
    if whole.shape != parts[0].shape[:-1] + (width,):
        return None
    address = whole.__array_interface__["data"][0]
    for part in parts:  # each part must start where the previous one ended, with whole's strides
        if (not isinstance(part, np.ndarray) or part.base is not whole
                or part.dtype != whole.dtype or part.strides != whole.strides
                or part.__array_interface__["data"][0] != address):
            return None
        address += part.shape[-1] * whole.itemsize
    return whole


def stackable(parts: list) -> bool:
    """Whether records of GGUF blocks can be packed: each a W^T (a linear weight) of the same
    kind, row length (C, the input dim) and activation rule."""
    first = parts[0]
    return all(isinstance(part, QuantizedMatrix) and part.transposed
               and (part.kind, part.cols, part.activations)
               == (first.kind, first.cols, first.activations) for part in parts)


def _stack_blocks(parts: list[QuantizedMatrix]) -> list[QuantizedMatrix]:
    """W^T records (C, R_i) -> records over consecutive rows of one new (sum R_i, row bytes)
    blocks array (the module docstring); each holds its part's blocks, so the same values."""
    if not stackable(parts):
        raise ValueError("only W^T records of one kind, row length and activation rule pack")
    whole = np.concatenate([part.blocks for part in parts])    # (sum R_i, row bytes) uint8
    views, start = [], 0
    for part in parts:
        rows = part.blocks.shape[0]
        views.append(replace(part, blocks=whole[start:start + rows]))   # (R_i, row bytes) view
        start += rows
    return views


def _stacked_whole(parts: list) -> QuantizedMatrix | None:
    """The record (C, sum R_i) over the blocks array whose consecutive rows the parts' blocks
    are, in order (_stack_blocks made them); None otherwise."""
    if not stackable(parts):
        return None
    whole = parts[0].blocks.base
    if not isinstance(whole, np.ndarray) or not whole.flags.c_contiguous or whole.ndim != 2:
        return None
    if whole.shape[0] != sum(part.blocks.shape[0] for part in parts):
        return None
    address, row_bytes = whole.__array_interface__["data"][0], whole.strides[0]
    for part in parts:   # each part's rows must start where the previous part's ended
        blocks = part.blocks
        if (blocks.base is not whole or blocks.shape[1] != whole.shape[1]
                or blocks.strides != whole.strides
                or blocks.__array_interface__["data"][0] != address):
            return None
        address += blocks.shape[0] * row_bytes
    return replace(parts[0], blocks=whole)
