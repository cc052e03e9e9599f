"""Shape helpers for backward passes that undo NumPy broadcasting."""
from __future__ import annotations

import numpy as np


def sum_to_shape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `x` over the axes that broadcasting added or stretched, so the result has `shape`.

    A forward that broadcast an input (a bias over (B, T), shared K/V over query heads in GQA)
    must add up the gradient over those axes in backward: this is that sum.

    >>> sum_to_shape(np.ones((2, 3, 4)), (1, 4)).tolist()
    [[6.0, 6.0, 6.0, 6.0]]
    """
    extra = x.ndim - len(shape)
    if extra > 0:
        x = x.sum(axis=tuple(range(extra)))  # drop leading axes broadcasting added
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    if stretched:
        x = x.sum(axis=stretched, keepdims=True)
    return x
