"""TopK's auxiliary loss (AuxK): the dead features are asked to reconstruct what the live ones
missed, so that they get a gradient and come back (Gao et al. 2024, appendix A.2; SAELens 6's
`TopKTrainingSAE.calculate_topk_aux_loss`, term for term):

    residual = x - out                                  the live features' error, held constant
    k_aux    = min(C // 2, n_dead),  scale = min(n_dead / (C // 2), 1)
    aux      = pre at each row's k_aux largest dead features, 0 elsewhere      (no ReLU)
    loss     = coefficient * scale * mean over rows of ||aux @ W_dec - residual||^2

No dead feature: loss 0. Backward, with e = aux @ W_dec - residual and m the chosen positions:

    de     = 2 coefficient scale e / N
    dpre   = (de W_dec^T) * m          reaches the encoder like the main loss's dpre
    dW_dec = aux^T de                  (no bias: b_dec is already inside the residual)
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops.sae import top_k_mask


class AuxKCtx(NamedTuple):
    error: np.ndarray | None    # (N, C) aux @ W_dec - residual; None when no feature is dead
    aux: np.ndarray | None      # (N, F) the dead features' kept pre-activations
    mask: np.ndarray | None     # (N, F) bool: which they are
    w_dec: np.ndarray           # (F, C)
    weight: float               # coefficient * scale


def topk_aux_forward(x: np.ndarray, out: np.ndarray, pre: np.ndarray, w_dec: np.ndarray,
                     dead: np.ndarray, *, coefficient: float) -> tuple[float, AuxKCtx]:
    """x, out (N, C), pre (N, F), w_dec (F, C), dead (F,) bool -> (loss, ctx)."""
    n_dead = int(np.sum(dead))
    if n_dead == 0 or coefficient == 0.0:
        return 0.0, AuxKCtx(None, None, None, w_dec, 0.0)
    half = x.shape[-1] // 2
    scale = min(n_dead / half, 1.0)
    candidates = np.where(dead, pre, -np.inf)                   # (N, F): live ones never picked
    mask = top_k_mask(candidates, min(half, n_dead))
    aux = np.where(mask, pre, 0).astype(pre.dtype)              # (N, F)
    residual = x - out                                          # (N, C), no gradient through it
    error = aux @ w_dec - residual                              # (N, F) @ (F, C) -> (N, C)
    weight = coefficient * scale
    loss = weight * float(np.sum(error * error)) / x.shape[0]
    return loss, AuxKCtx(error, aux, mask, w_dec, weight)


def topk_aux_backward(dloss: float, ctx: AuxKCtx) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(dpre (N, F), dw_dec (F, C)), or (None, None) when the loss was 0 by construction."""
    if ctx.error is None:
        return None, None
    de = (2.0 * dloss * ctx.weight / ctx.error.shape[0]) * ctx.error         # (N, C)
    dpre = np.where(ctx.mask, de @ ctx.w_dec.T, 0).astype(ctx.aux.dtype)      # (N, F)
    dw_dec = (ctx.aux.T @ de).astype(ctx.w_dec.dtype)                         # (F, C)
    return dpre, dw_dec
