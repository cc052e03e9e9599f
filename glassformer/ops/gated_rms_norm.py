"""Gated RMS norm (Qwen3-Next's `RMSNormGated`): normalise, scale, then gate by SiLU of z.

    y = rms_norm(x; w, eps) * silu(z)          x, z (..., C), w (C,) -> y (..., C)

The norm comes before the gate, as transformers' `Qwen3NextRMSNormGated` ("norm before gate").
It is two existing ops and a product, so its backward is theirs with the product rule between:

    dn = dy * silu(z) -> rms_norm_backward ;  ds = dy * n -> silu_backward
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import ShapeError
from glassformer.ops._check import check_float, check_same_dtype
from glassformer.ops.activation import SiluCtx, silu_backward, silu_forward
from glassformer.ops.rms_norm import RMSNormCtx, rms_norm_backward, rms_norm_forward


class GatedRMSNormCtx(NamedTuple):
    """Saved for backward: the norm's ctx and output n, the gate's ctx and output s."""
    norm: RMSNormCtx
    n: np.ndarray
    silu: SiluCtx
    s: np.ndarray


def gated_rms_norm_forward(x: np.ndarray, z: np.ndarray, w: np.ndarray, *, eps: float = 1e-6
                           ) -> tuple[np.ndarray, GatedRMSNormCtx]:
    """rms_norm(x) * w * silu(z). x, z (..., C), w (C,) -> (..., C).

    >>> y, _ = gated_rms_norm_forward(np.array([1.0, 1.0]), np.zeros(2), np.ones(2))
    >>> y.tolist()
    [0.0, 0.0]
    """
    check_float("z", z)
    check_same_dtype(x=x, z=z)
    if z.shape != x.shape:
        raise ShapeError(f"expected z of x's shape {x.shape}, got {z.shape}")
    n, norm_ctx = rms_norm_forward(x, w, eps=eps)       # (..., C)
    s, silu_ctx = silu_forward(z)                       # (..., C)
    return n * s, GatedRMSNormCtx(norm=norm_ctx, n=n, silu=silu_ctx, s=s)


def gated_rms_norm_backward(dy: np.ndarray, ctx: GatedRMSNormCtx):
    """(dx, dz, dw)."""
    dx, dw = rms_norm_backward(dy * ctx.s, ctx.norm)
    dz = silu_backward(dy * ctx.n, ctx.silu)
    return dx, dz, dw
