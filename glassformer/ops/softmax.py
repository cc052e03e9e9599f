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


def row_max(x: np.ndarray) -> np.ndarray:
    """max over the last axis, (..., S) -> (..., 1), by folding the row in half repeatedly.

    note: NumPy's max along a short last axis runs a scalar loop per row (~3x slower than an
    elementwise pass). Folding compares the first ceil(w/2) columns with the last ceil(w/2) (for
    odd w the middle column meets itself) until one column is left: ceil(log2 S) vectorized
    np.maximum calls on ever shorter arrays, about one pass in all. Same value as x.max(-1).

    >>> row_max(np.array([[3.0, 1.0, 4.0, 1.0, 5.0]])).tolist()
    [[5.0]]
    """
    width = x.shape[-1]
    while width > 1:
        half = width // 2
        x = np.maximum(x[..., :width - half], x[..., half:width])  # -> (..., ceil(w / 2))
        width = x.shape[-1]
    return x


def softmax_forward(x: np.ndarray, *, mask: np.ndarray | None = None
                    ) -> tuple[np.ndarray, SoftmaxCtx]:
    """Softmax of `x` over its last axis; `mask` (bool, broadcastable to x) keeps True entries.

    (..., S) -> (..., S). Each row sums to 1, or to 0 when the mask allows nothing in it.

    >>> p, _ = softmax_forward(np.array([1.0, 1.0]))
    >>> p.tolist()
    [0.5, 0.5]
    """
    logits = masked_logits(x, mask)  # masked logits can never win any weight
    shift = row_max(logits)                             # (..., S) -> (..., 1)
    # note: a fully masked row has max -inf; shifting by 0 instead avoids (-inf) - (-inf) = NaN.
    shift = np.where(np.isfinite(shift), shift, 0.0)
    if logits is x:
        probs = x - shift                               # a fresh array, worked on in place
    else:
        probs = logits                                  # the masked copy is already ours
        probs -= shift
    np.exp(probs, out=probs)
    total = probs.sum(axis=-1, keepdims=True)           # (..., S) -> (..., 1)
    # subtle: total is 0 only for fully masked rows, whose exps are all 0; dividing by 1 keeps 0s.
    probs *= 1.0 / np.where(total > 0.0, total, 1.0)   # one reciprocal per row, then products
    return probs, SoftmaxCtx(probs=probs)


def softmax_backward(dprobs: np.ndarray, ctx: SoftmaxCtx) -> np.ndarray:
    """Gradient of the loss w.r.t. the softmax input: p * (dp - <dp, p>). (..., S) -> (..., S)."""
    probs = ctx.probs
    # (..., S) . (..., S) -> (..., 1): a row dot (einsum: no (..., S) product array)
    dot = np.einsum("...s,...s->...", dprobs, probs)[..., None]
    dx = dprobs - dot                                    # a fresh array, scaled in place
    dx *= probs
    return dx
