"""Softplus, log(1 + exp(x)), the smooth ReLU that turns Gated DeltaNet's `a + dt_bias` into a
positive step size. Computed as logaddexp(0, x) (no overflow for large x; torch switches to x past
20, which equals it to float32 precision). Backward: dx = dy * sigmoid(x)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float


class SoftplusCtx(NamedTuple):
    """Saved for backward: sigmoid(x), the slope."""
    slope: np.ndarray


def softplus_forward(x: np.ndarray) -> tuple[np.ndarray, SoftplusCtx]:
    """log(1 + exp(x)). (...) -> (...), x's dtype.

    >>> y, _ = softplus_forward(np.array([0.0]))
    >>> y.round(6).tolist()
    [0.693147]
    """
    check_float("x", x)
    y = np.logaddexp(x.dtype.type(0), x)
    slope = np.exp(x - y)                     # sigmoid(x) = exp(x) / (1 + exp(x))
    return y, SoftplusCtx(slope=slope)


def softplus_backward(dy: np.ndarray, ctx: SoftplusCtx) -> np.ndarray:
    """dx = dy * sigmoid(x). (...) -> (...)."""
    return dy * ctx.slope
