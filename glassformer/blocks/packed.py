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
"""
from __future__ import annotations

import numpy as np


def pack_columns(parts: list[np.ndarray]) -> list[np.ndarray]:
    """Copy parts (..., N_i) side by side into one new row-major (..., sum N_i) array; returns
    views of its column blocks, in order, with the parts' values (the array is their `.base`).

    >>> a, b = pack_columns([np.ones((2, 1), np.float32), np.zeros((2, 2), np.float32)])
    >>> a.base.shape, a.base is b.base
    ((2, 3), True)
    """
    widths = [part.shape[-1] for part in parts]
    whole = np.empty(parts[0].shape[:-1] + (sum(widths),), parts[0].dtype)  # (..., sum N_i)
    views, start = [], 0
    for part, width in zip(parts, widths):
        view = whole[..., start:start + width]                              # (..., N_i), a view
        view[...] = part
        views.append(view)
        start += width
    return views


def packed_whole(parts: list[np.ndarray]) -> np.ndarray | None:
    """The row-major array whose consecutive column blocks the parts are, in order, when they are
    views of one such array (pack_columns made them); None otherwise.

    >>> a, b = pack_columns([np.ones((2, 1), np.float32), np.zeros((2, 2), np.float32)])
    >>> packed_whole([a, b]).shape, packed_whole([b, a])
    ((2, 3), None)
    """
    whole = getattr(parts[0], "base", None)     # a QuantizedMatrix has none: never packed
    if not isinstance(whole, np.ndarray) or not whole.flags.c_contiguous:
        return None
    width = sum(part.shape[-1] for part in parts)
    if whole.shape != parts[0].shape[:-1] + (width,):
        return None
    address = whole.__array_interface__["data"][0]
    for part in parts:  # each part must start where the previous one ended, with whole's strides
        if (part.base is not whole or part.dtype != whole.dtype or part.strides != whole.strides
                or part.__array_interface__["data"][0] != address):
            return None
        address += part.shape[-1] * whole.itemsize
    return whole
