"""The router z-loss of ST-MoE: keep a Mixture-of-Experts router's logits small.

Zoph et al. 2022 ("ST-MoE: Designing Stable and Transferable Sparse Expert Models", eq. 5) found
that large router logits make training in low precision unstable, and penalise the squared
log-partition of every routing row. Pooled over the L layers and the kept rows (padding dropped):

    z_{l,n} = log sum_e exp(logits_{l,n,e})                    (log-sum-exp, never overflows)
    loss    = mean over kept (l, n) of z_{l,n}^2

Without a mask this is `router_z_loss_func` of transformers' Switch Transformers on the (L, N, E)
stack (its num_groups x tokens_per_group). Backward: dz/dlogits is the softmax, so

    dlogits_{l,n,e} = dloss * 2 * z_{l,n} * p_{l,n,e} * m_n / R     R = L * (number of kept rows)

Derivation: docs/derivations/load_balance.md (the z-loss section).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float, check_shape
from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.ops.load_balance import row_weights


class RouterZLossCtx(NamedTuple):
    """Saved for backward.

    probs:     softmax(logits) (L, N, E), the derivative of z.
    row_grad:  (L, N, 1) 2 * z * m_n / R, each row's factor in front of p.
    """
    probs: np.ndarray
    row_grad: np.ndarray


def router_z_loss_forward(logits: np.ndarray, *, mask: np.ndarray | None = None
                          ) -> tuple[np.ndarray, RouterZLossCtx]:
    """Mean squared log-sum-exp of the router rows. logits (L, N, E), mask (N,) bool -> 0-d loss.

    >>> loss, _ = router_z_loss_forward(np.zeros((1, 3, 4)))
    >>> round(float(loss), 6)     # z = log 4 in every row
    1.921812
    """
    check_float("logits", logits)
    sizes = check_shape("logits", logits, ("L", "N", "E"), {})
    if mask is not None:
        check_shape("mask", mask, ("N",), sizes)
    weights = row_weights(mask, sizes["N"])                                # (N,)
    total_rows = sizes["L"] * float(weights.sum())                         # R
    inv_rows = 1.0 / total_rows if total_rows > 0.0 else 0.0
    logp, softmax_ctx = log_softmax_forward(logits)                        # (L, N, E)
    # logp_e = x_e - z for every e, so any one column gives z back: no second log-sum-exp.
    z = logits[..., :1] - logp[..., :1]                                    # (L, N, 1)
    row_weight = (weights * inv_rows).astype(logits.dtype)[:, None]        # (N, 1)
    loss = float(np.sum(z * z * row_weight))
    ctx = RouterZLossCtx(probs=softmax_ctx.probs, row_grad=2.0 * z * row_weight)
    return np.array(loss, dtype=logits.dtype), ctx


def router_z_loss_backward(dloss: np.ndarray, ctx: RouterZLossCtx) -> np.ndarray:
    """dlogits (L, N, E) = dloss * 2 z p m / R."""
    return ctx.probs * (ctx.row_grad * float(dloss))
