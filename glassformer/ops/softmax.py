"""Softmax over the last axis, with an optional boolean mask.

    softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k

Subtracting the row maximum m changes nothing mathematically but keeps exp() from overflowing.
Matches `torch.softmax(x, dim=-1)`; with a mask it matches torch's
`scaled_dot_product_attention` convention (True = may be attended, False = weight exactly 0), and a
row with no True entry gives all zeros instead of NaN (torch would give NaN there).

Backward, a vector-Jacobian product that never builds the (S, S) Jacobian:

    dx_j = p_j * (dp_j - sum_k dp_k p_k)

Derivation: docs/derivations/softmax.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SoftmaxCtx(NamedTuple):
    """Saved for backward: the output probabilities (backward needs nothing else)."""
    probs: np.ndarray   # same shape as x; exact zeros where masked


def masked_logits(x: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Set entries where `mask` is False to -inf (so they get exactly zero probability)."""
    if mask is None:
        return x
    return np.where(mask, x, -np.inf)


def softmax_forward(x: np.ndarray, *, mask: np.ndarray | None = None
                    ) -> tuple[np.ndarray, SoftmaxCtx]:
    """Softmax of `x` over its last axis; `mask` (bool, broadcastable to x) keeps True entries.

    (..., S) -> (..., S). Each row sums to 1, or to 0 when the mask allows nothing in it.

    >>> p, _ = softmax_forward(np.array([1.0, 1.0]))
    >>> p.tolist()
    [0.5, 0.5]
    """
    x = masked_logits(x, mask)  # masked logits can never win any weight
    row_max = x.max(axis=-1, keepdims=True)
    # note: a fully masked row has max -inf; shifting by 0 instead avoids (-inf) - (-inf) = NaN.
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    probs = x - row_max                                 # a fresh array, worked on in place
    np.exp(probs, out=probs)
    total = probs.sum(axis=-1, keepdims=True)           # (..., S) -> (..., 1)
    # subtle: total is 0 only for fully masked rows, whose exps are all 0; dividing by 1 keeps 0s.
    probs /= np.where(total > 0.0, total, 1.0)
    return probs, SoftmaxCtx(probs=probs)


def softmax_backward(dprobs: np.ndarray, ctx: SoftmaxCtx) -> np.ndarray:
    """Gradient of the loss w.r.t. the softmax input: p * (dp - <dp, p>). (..., S) -> (..., S)."""
    probs = ctx.probs
    dot = (dprobs * probs).sum(axis=-1, keepdims=True)  # (..., S) -> (..., 1)
    dx = dprobs - dot                                    # a fresh array, scaled in place
    dx *= probs
    return dx
