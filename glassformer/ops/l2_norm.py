"""L2 normalization over the last axis, eps inside the square root (Gated DeltaNet's q and k).

    r = 1 / sqrt(sum_c x_c^2 + eps)            (..., 1)
    y = x * r                                  x (..., C) -> y (..., C)

As transformers' `l2norm` in modeling_qwen3_next.py (FLA's form: eps added to the sum of
squares, not to the norm). Backward: dx = r (dy - y (y . dy)), the projection of dy off y,
scaled: moving x along itself does not change y.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float
from glassformer.ops._scalars import check_eps


class L2NormCtx(NamedTuple):
    """Saved for backward: the output y (..., C) and r (..., 1)."""
    y: np.ndarray
    r: np.ndarray


def l2_norm_forward(x: np.ndarray, *, eps: float = 1e-6) -> tuple[np.ndarray, L2NormCtx]:
    """y = x / sqrt(sum(x^2) + eps) over the last axis. (..., C) -> (..., C).

    >>> y, _ = l2_norm_forward(np.array([3.0, 4.0]), eps=0.0)
    >>> y.round(6).tolist()
    [0.6, 0.8]
    """
    check_float("x", x)
    eps = check_eps("eps", eps)
    r = 1.0 / np.sqrt(np.vecdot(x, x)[..., None] + eps)   # (..., 1)
    y = x * r
    return y, L2NormCtx(y=y, r=r)


def l2_norm_backward(dy: np.ndarray, ctx: L2NormCtx) -> np.ndarray:
    """dx = r (dy - y (y . dy)). (..., C) -> (..., C)."""
    return ctx.r * (dy - ctx.y * np.vecdot(ctx.y, dy)[..., None])
