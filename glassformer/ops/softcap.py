"""Logit soft-capping (Gemma 2 and 3): squash scores smoothly into (-cap, cap).

    y = cap * tanh(x / cap)

Near 0 it is the identity (tanh u ~ u); far out it saturates at +-cap, so no single score or
logit can grow without bound. Gemma applies it to the attention scores (`attn_logit_softcapping`,
after the scale, before the mask) and to the final logits (`final_logit_softcapping`), as
transformers' Gemma3 does.

Backward: dy/dx = 1 - tanh(x / cap)^2, so dx = dy * (1 - t^2) with t the saved tanh.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float


class SoftcapCtx(NamedTuple):
    """Saved by the forward: t = tanh(x / cap), same shape as x (its square is the slope)."""
    tanh: np.ndarray


def check_cap(cap) -> float:
    """A soft cap must be a finite number > 0."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < np.inf:
        raise GlassformerError(f"expected a soft cap that is a number > 0, got {cap!r}")
    return float(cap)


def softcap_forward(x: np.ndarray, cap: float) -> tuple[np.ndarray, SoftcapCtx]:
    """cap * tanh(x / cap), any shape, dtype kept.

    >>> y, _ = softcap_forward(np.array([0.0, 100.0]), 10.0)
    >>> [round(v, 4) for v in y.tolist()]
    [0.0, 10.0]
    """
    check_float("x", x)
    cap = check_cap(cap)
    t = np.tanh(x * (1.0 / cap))          # a Python float keeps float32 float32
    return t * cap, SoftcapCtx(tanh=t)


def softcap_backward(dy: np.ndarray, ctx: SoftcapCtx) -> np.ndarray:
    """dx = dy * (1 - tanh^2), the shape of x."""
    slope = 1.0 - ctx.tanh * ctx.tanh
    return dy * slope
