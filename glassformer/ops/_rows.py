"""Sums over the last axis as one BLAS matrix-vector product (used by softmax and LayerNorm)."""
from __future__ import annotations

import numpy as np


def row_sum(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """scale * (sum over the last axis), (..., S) -> (..., 1): rows @ a vector of `scale`s.

    note: NumPy's sum or mean along a short last axis runs a loop per row; BLAS reads the rows in
    one pass, several times faster on short rows (docs/performance.md). scale = 1 / S gives the
    row mean.

    >>> row_sum(np.array([[1.0, 3.0]]), 0.5).tolist()
    [[2.0]]
    """
    width = x.shape[-1]
    rows = x.reshape(-1, width)                             # (..., S) -> (N, S)
    total = rows @ np.full(width, scale, x.dtype)           # (N, S) @ (S,) -> (N,)
    return total.reshape(x.shape[:-1] + (1,))               # (N,) -> (..., 1)
