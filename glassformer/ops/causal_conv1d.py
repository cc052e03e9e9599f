"""The short causal depthwise convolution of Gated DeltaNet (and Mamba), with its tail state.

Each channel c has its own W taps w[c, 0..W-1]; the output at step t mixes the last W inputs of
that channel, the newest with the last tap:

    xp   = [tail ; x]                           tail (B, W-1, C): the W-1 inputs before x
                                                (zeros at the start of a sequence)
    y[t] = sum_j w[:, j] * xp[t + j]            x (B, T, C), w (C, W) -> y (B, T, C)
    new_tail = xp[-(W-1):]                      what the next call continues from

This is torch's `conv1d(x, w[:, None], padding=W-1, groups=C)[..., :T]` (transformers'
`causal_conv1d_fn`) when tail is zeros, and `causal_conv1d_update` for a decoded token with the
tail kept from the step before (transformers keeps W inputs there; the oldest is never read, so
we keep W-1). No bias (Qwen3-Next has none) and no activation: the block applies SiLU after.

Backward, with dxp the gradient reaching the padded input:

    dxp[t + j] += w[:, j] * dy[t]               for every tap j
    dw[:, j]    = sum over b, t of dy[t] * xp[t + j]
    dx = dxp[W-1:],  dtail = dxp[:W-1]          (dtail only when a tail was given)

The tail returned by forward is a slice of its input, so its gradient (a decoded state read by
the next call) is added into dxp's last W-1 rows by `causal_conv1d_backward(..., dnew_tail=)`.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float, check_same_dtype, check_shape


class CausalConv1dCtx(NamedTuple):
    """Saved for backward.

    xp:       the padded input [tail ; x] (B, W-1+T, C), read by dw.
    w:        the taps (C, W), read by dx.
    had_tail: whether a tail was given (else its gradient is None).
    """
    xp: np.ndarray
    w: np.ndarray
    had_tail: bool


def causal_conv1d_forward(x: np.ndarray, w: np.ndarray, *, tail: np.ndarray | None = None
                          ) -> tuple[tuple[np.ndarray, np.ndarray], CausalConv1dCtx]:
    """((y, new_tail), ctx). x (B, T, C), w (C, W), tail (B, W-1, C) or None (zeros).

    >>> (y, tail), _ = causal_conv1d_forward(np.ones((1, 3, 1)), np.array([[1.0, 2.0]]))
    >>> y[0, :, 0].tolist(), tail[0, :, 0].tolist()
    ([2.0, 3.0, 3.0], [1.0])
    """
    check_float("x", x)
    check_float("w", w)
    sizes: dict = {}
    check_shape("x", x, ("B", "T", "C"), sizes)
    check_shape("w", w, ("C", "W"), sizes)
    check_same_dtype(x=x, w=w)
    width = w.shape[1]
    if width < 1:
        raise GlassformerError(f"expected the conv kernel width W >= 1, got {width}")
    if tail is None:
        tail_in = np.zeros((x.shape[0], width - 1, x.shape[2]), dtype=x.dtype)
    else:
        check_float("tail", tail)
        sizes["W-1"] = width - 1
        check_shape("tail", tail, ("B", "W-1", "C"), sizes)
        check_same_dtype(x=x, tail=tail)
        tail_in = tail
    xp = np.concatenate([tail_in, x], axis=1)           # (B, W-1+T, C)
    steps = x.shape[1]
    y = np.zeros_like(x)                                # (B, T, C)
    for j in range(width):
        y += xp[:, j:j + steps] * w[:, j]               # tap j reads W-1-j steps back
    new_tail = xp[:, xp.shape[1] - (width - 1):].copy()  # (B, W-1, C)
    return (y, new_tail), CausalConv1dCtx(xp=xp, w=w, had_tail=tail is not None)


def causal_conv1d_backward(dy: np.ndarray, ctx: CausalConv1dCtx, *,
                           dnew_tail: np.ndarray | None = None):
    """(dx, dw, dtail): dtail is None when forward had no tail. dy (B, T, C)."""
    width = ctx.w.shape[1]
    steps = dy.shape[1]
    dxp = np.zeros_like(ctx.xp)                         # (B, W-1+T, C)
    dw = np.empty_like(ctx.w)                           # (C, W)
    for j in range(width):
        dxp[:, j:j + steps] += dy * ctx.w[:, j]
        dw[:, j] = np.einsum("btc,btc->c", dy, ctx.xp[:, j:j + steps])
    if dnew_tail is not None:
        dxp[:, dxp.shape[1] - (width - 1):] += dnew_tail  # fan-out: the tail is also an output
    dx = dxp[:, width - 1:]
    dtail = dxp[:, :width - 1].copy() if ctx.had_tail else None
    return dx.copy(), dw, dtail
