"""Per-token log-probabilities of given targets: what DPO and GRPO sum over a completion.

For logits (B, T, V) and integer targets (B, T):

    logp[b, t]    = log softmax(logits[b, t])[targets[b, t]]      0 where the target is ignored
    dlogits[b, t] = dlogp[b, t] * (onehot(targets[b, t]) - p[b, t])    0 where ignored

This is cross-entropy without the mean (ops/cross_entropy.py: the loss there is
-mean(logp)); preference and RL losses weigh each sequence's tokens differently, so they need
the log-probs one by one. It equals TRL's `selective_log_softmax(logits, labels)` (and
`torch.gather(logits.log_softmax(-1), -1, labels[..., None])`) at every counted position.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops.cross_entropy import IGNORE_INDEX, log_softmax_forward


class TokenLogpsCtx(NamedTuple):
    """Saved for backward: softmax probabilities (B, T, V), targets with ignored ones set to 0
    (B, T), and where they count (B, T) bool."""
    probs: np.ndarray
    targets: np.ndarray
    valid: np.ndarray


def token_logps_forward(logits: np.ndarray, targets: np.ndarray, *,
                        ignore_index: int = IGNORE_INDEX) -> tuple[np.ndarray, TokenLogpsCtx]:
    """logits (B, T, V), targets (B, T) -> logp (B, T) of the logits' dtype, 0 where ignored.

    >>> logp, _ = token_logps_forward(np.zeros((1, 2, 4)), np.array([[3, -100]]))
    >>> np.round(logp, 6).tolist()    # log(1/4) at the counted position
    [[-1.386294, 0.0]]
    """
    logp_all, softmax_ctx = log_softmax_forward(logits)               # (B, T, V)
    valid = targets != ignore_index                                   # (B, T) bool
    safe = np.where(valid, targets, 0)                                # (B, T), indexable
    picked = np.take_along_axis(logp_all, safe[..., None], axis=-1)   # (B, T, 1)
    logp = np.where(valid, picked[..., 0], 0.0).astype(logits.dtype)  # (B, T)
    return logp, TokenLogpsCtx(probs=softmax_ctx.probs, targets=safe, valid=valid)


def token_logps_backward(dlogp: np.ndarray, ctx: TokenLogpsCtx) -> np.ndarray:
    """dlogp (B, T) -> dlogits (B, T, V) = dlogp * (onehot(target) - probs), 0 where ignored."""
    weight = np.where(ctx.valid, dlogp, 0.0).astype(ctx.probs.dtype)  # (B, T)
    dlogits = ctx.probs * -weight[..., None]                           # (B, T, V), fresh
    rows, cols = np.nonzero(ctx.valid)                                 # counted positions
    dlogits[rows, cols, ctx.targets[rows, cols]] += weight[rows, cols]
    return dlogits
