"""Softmax over the last axis, with an optional boolean mask.

    softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m),   for any m; textbooks take m = max_k x_k

Softmax does not change when every x_j in a row moves by the same m. The row maximum is the usual
choice because exp(x_j - m) <= 1 then cannot overflow. Here m = 0 is tried first, since finding a
row maximum costs more than the exp itself (docs/performance.md). The row sums show whether that
was safe, and the rows are shifted by their maximum when it was not:

    sum_k exp(x_k) finite    no exp overflowed (each term is at most the sum)
    sum_k exp(x_k) >= 2^-64  the row's largest term is at least 2^-64 / S. A term that fell below
                             float32's normal range (~1e-38) is then under 1e-38 / 2^-64 ~ 2e-19
                             of its row's sum, so losing its last digits changes no probability
                             by more than that.

Scores in a model are rarely beyond +-80, so the shift is almost never needed.
Matches `torch.softmax(x, dim=-1)` to float rounding. With a mask it matches torch's
`scaled_dot_product_attention` convention (True = may be attended, False = weight exactly 0). A
row with no True entry gives all zeros instead of NaN (torch would give NaN there).

Backward, a vector-Jacobian product that never builds the (S, S) Jacobian:

    dx_j = p_j * (dp_j - sum_k dp_k p_k)

Derivation: docs/derivations/softmax.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, ShapeError
from glassformer.ops._check import broadcasts_into, check_float, check_shape
from glassformer.ops._rows import row_sum


class SoftmaxCtx(NamedTuple):
    """Saved for backward: the output probabilities (backward needs nothing else)."""
    probs: np.ndarray   # same shape as x; exact zeros where masked


def masked_logits(x: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """x with -inf added where `mask` is False (so those entries get exactly zero probability).

    note: the -inf is added through a bias of the mask's own shape ((T, S) for a causal mask),
    one broadcast pass over x, several times faster than np.where(mask, x, -inf), which builds
    x's full shape from three operands. x must be finite where
    masked, or inf + (-inf) gives NaN; scores from finite q and k always are.
    """
    if mask is None:
        return x
    bias = np.zeros(mask.shape, x.dtype)            # the mask's shape, x's dtype
    bias[~mask] = -np.inf
    return x + bias                                 # (..., S) + broadcast bias -> (..., S)


def row_max(x: np.ndarray) -> np.ndarray:
    """max over the last axis, (..., S) -> (..., 1), by folding the row in half repeatedly.

    note: NumPy's max along a short last axis runs a scalar loop per row, several times slower
    than an elementwise pass. Folding compares the first ceil(w/2) columns with the last
    ceil(w/2) (for odd w the middle column meets itself) until one column is left: ceil(log2 S)
    vectorized np.maximum calls on ever shorter arrays, about one pass in all. Same value as
    x.max(-1).

    >>> row_max(np.array([[3.0, 1.0, 4.0, 1.0, 5.0]])).tolist()
    [[5.0]]
    """
    width = x.shape[-1]
    while width > 1:
        half = width // 2
        x = np.maximum(x[..., :width - half], x[..., half:width])  # -> (..., ceil(w / 2))
        width = x.shape[-1]
    return x


SAFE_ROW_SUM = 2.0 ** -64  # below this, a row's exps may have lost digits to underflow


def _check_inputs(x, mask) -> None:
    """x: a float array (..., S), S >= 1; mask: None, or booleans that broadcast to x's shape."""
    check_float("x", x)
    sizes = check_shape("x", x, ("...", "S"), {})
    if sizes["S"] == 0:
        raise ShapeError(f"expected x with at least one entry per row to normalize (S >= 1), "
                         f"got {x.shape}")
    if mask is None:
        return
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        kind = mask.dtype if isinstance(mask, np.ndarray) else type(mask).__name__
        raise GlassformerError(f"expected mask to be a boolean array (True = kept), got {kind}")
    # note: the mask may repeat along x's dims but not add any: x + bias would grow the output.
    if not broadcasts_into(mask.shape, x.shape):
        raise ShapeError(f"expected mask broadcastable to x's shape (..., S) = {x.shape}, "
                         f"got {mask.shape}")


def softmax_forward(x: np.ndarray, *, mask: np.ndarray | None = None
                    ) -> tuple[np.ndarray, SoftmaxCtx]:
    """Softmax of `x` over its last axis; `mask` (bool, broadcastable to x) keeps True entries.

    (..., S) -> (..., S). Each row sums to 1, or to 0 when the mask allows nothing in it.

    >>> p, _ = softmax_forward(np.array([1.0, 1.0]))
    >>> p.tolist()
    [0.5, 0.5]
    """
    _check_inputs(x, mask)
    logits = masked_logits(x, mask)  # masked logits can never win any weight
    with np.errstate(over="ignore", invalid="ignore"):  # shows in the row sums; redone below
        exps = np.exp(logits) if logits is x else np.exp(logits, out=logits)   # m = 0 first
        total = row_sum(exps)                               # (..., S) -> (..., 1)
    if np.isfinite(total).all() and total.min(initial=1.0) >= SAFE_ROW_SUM:
        exps *= 1.0 / total                                 # one reciprocal per row, then products
        return exps, SoftmaxCtx(probs=exps)
    exps = _shifted_exps(masked_logits(x, mask))            # m = row max: the textbook way
    total = row_sum(exps)
    # subtle: total is 0 only for fully masked rows, whose exps are all 0; dividing by 1 keeps 0s.
    exps *= 1.0 / np.where(total > 0.0, total, 1.0)
    return exps, SoftmaxCtx(probs=exps)


def _shifted_exps(logits: np.ndarray) -> np.ndarray:
    """exp(x - row max) (..., S), in a fresh array: no entry above 1, so none overflows."""
    shift = row_max(logits)                                 # (..., S) -> (..., 1)
    # note: a fully masked row has max -inf; shifting by 0 instead avoids (-inf) - (-inf) = NaN.
    shift = np.where(np.isfinite(shift), shift, 0.0)
    shifted = logits - shift
    return np.exp(shifted, out=shifted)


def softmax_backward(dprobs: np.ndarray, ctx: SoftmaxCtx) -> np.ndarray:
    """Gradient of the loss w.r.t. the softmax input: p * (dp - <dp, p>). (..., S) -> (..., S)."""
    probs = ctx.probs
    # (..., S) . (..., S) -> (..., 1): a row dot (vecdot: no (..., S) product array)
    dot = np.vecdot(dprobs, probs)[..., None]
    dx = dprobs - dot                                    # a fresh array, scaled in place
    dx *= probs
    return dx
