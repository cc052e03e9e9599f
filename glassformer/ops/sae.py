"""A sparse autoencoder's encoder and its training loss, as SAELens 6 computes them.

Encoder (SAELens's `encode_with_hidden_pre`, with `apply_b_dec_to_input`):

    sae_in = x - b_dec                          the decoder's bias is taken off the input first
    pre    = sae_in @ W_enc + b_enc             (N, C) @ (C, F) -> (N, F)
    acts   = ReLU(pre)                          "standard" architecture
    acts   = ReLU(pre) on each row's k largest pre, 0 elsewhere       "topk" architecture

The decoder is a plain linear layer, out = acts @ W_dec + b_dec (ops/linear.py).

Loss (SAELens's `training_forward_pass`; `calculate_aux_loss` of the standard SAE):

    mse = mean over rows of sum over C of (out - x)^2
    l1  = l1_coefficient * mean over rows of sum_f |acts_f| * ||W_dec[f]||     (lp_norm = 1)

The penalty weighs each feature by its decoder row's norm (Anthropic's April 2024 update, and
SAELens's standard SAE since 6.0), so shrinking acts while growing W_dec does not dodge it; its
gradient therefore reaches W_dec too. TopK has no L1 term (its sparsity is k).

Backward:

    dpre   = dacts * mask           mask: where acts is the pre-activation itself (ReLU > 0,
                                    and, for TopK, among the row's k largest)
    dW_enc = sae_in^T dpre,  db_enc = sum of dpre,  dsae_in = dpre W_enc^T
    dx     = dsae_in,        db_dec = -sum of dsae_in              (sae_in = x - b_dec)

and for the loss, with r = out - x and n_f = ||W_dec[f]||:

    dout = 2 r / N,  dx(target) = -2 r / N
    dacts = l1 * sign(acts) * n / N,  dW_dec[f] = l1 * (sum over rows of |acts_f|) / N * W_dec[f] / n_f

Matches sae_lens 6.51's StandardTrainingSAE and TopKTrainingSAE (tests/ops/test_sae.py).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward


class SAEEncodeCtx(NamedTuple):
    """Saved for backward: the linear layer's ctx (sae_in and W_enc) and where acts = pre; pre
    itself for TopK's auxiliary loss (ops/sae_aux.py), which reads the dead features' values."""
    linear: LinearCtx
    mask: np.ndarray        # (N, F) bool: the features whose activation is their pre-activation
    pre: np.ndarray         # (N, F) the pre-activations


class SAELossCtx(NamedTuple):
    """Saved for backward: the residual out - x, the activations and the decoder's rows."""
    residual: np.ndarray    # (N, C) out - x
    acts: np.ndarray        # (N, F)
    w_dec: np.ndarray       # (F, C)
    row_norms: np.ndarray   # (F,) ||W_dec[f]||
    l1: float               # 0 for TopK


def top_k_mask(pre: np.ndarray, k: int) -> np.ndarray:
    """(N, F) bool: True at each row's k largest entries (ties broken by position)."""
    if not 1 <= k <= pre.shape[-1]:
        raise GlassformerError(f"TopK needs 1 <= k <= d_sae ({pre.shape[-1]}), got k={k}")
    keep = np.argpartition(-pre, k - 1, axis=-1)[..., :k]               # (N, k) feature ids
    mask = np.zeros(pre.shape, dtype=bool)
    np.put_along_axis(mask, keep, True, axis=-1)
    return mask


def sae_encode_forward(x: np.ndarray, w_enc: np.ndarray, b_enc: np.ndarray, b_dec: np.ndarray,
                       *, k: int | None = None) -> tuple[np.ndarray, SAEEncodeCtx]:
    """Feature activations. x (N, C), w_enc (C, F), b_enc (F,), b_dec (C,) -> acts (N, F).

    k: None for ReLU (the standard SAE), else keep each row's k largest pre-activations (ReLU
    applied to those, as SAELens's TopK does). ctx keeps sae_in, W_enc and the mask.

    >>> acts, _ = sae_encode_forward(np.ones((2, 3)), np.eye(3), np.zeros(3), np.zeros(3), k=1)
    >>> acts.sum(axis=-1).tolist()
    [1.0, 1.0]
    """
    sizes = check_shape("x", check_float("x", x), ("N", "C"), {})
    check_shape("w_enc", w_enc, ("C", "F"), sizes)
    check_shape("b_enc", b_enc, ("F",), sizes)
    check_shape("b_dec", b_dec, ("C",), sizes)
    sae_in = x - b_dec                                      # (N, C)
    pre, lin = linear_forward(sae_in, w_enc, b_enc)         # (N, C) -> (N, F)
    mask = pre > 0
    if k is not None:
        mask &= top_k_mask(pre, k)
    acts = np.where(mask, pre, 0).astype(pre.dtype)         # (N, F)
    return acts, SAEEncodeCtx(lin, mask, pre)


def sae_encode_backward(dacts: np.ndarray, ctx: SAEEncodeCtx, *,
                        dpre_direct: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dx, dw_enc, db_enc, db_dec) for dacts (N, F). dpre_direct (N, F): a gradient
    that reaches the pre-activations without passing the activation (TopK's auxiliary loss)."""
    dpre = np.where(ctx.mask, dacts, 0).astype(dacts.dtype)            # (N, F)
    if dpre_direct is not None:
        dpre = dpre + dpre_direct           # pre feeds the activation and the auxiliary loss
    dsae_in, dw_enc, db_enc = linear_backward(dpre, ctx.linear)        # (N, F) -> (N, C)
    db_dec = -dsae_in.sum(axis=0)                # sae_in = x - b_dec: b_dec meets every row
    return dsae_in, dw_enc, db_enc, db_dec


def sae_loss_forward(x: np.ndarray, out: np.ndarray, acts: np.ndarray, w_dec: np.ndarray, *,
                     l1: float = 0.0) -> tuple[float, SAELossCtx]:
    """SAELens's training loss: mse + l1 * decoder-norm-weighted L1. x, out (N, C), acts (N, F),
    w_dec (F, C) -> a float. Pass l1=0 for TopK. `sae_loss_parts` splits the two terms."""
    sizes = check_shape("x", check_float("x", x), ("N", "C"), {})
    check_shape("out", out, ("N", "C"), sizes)
    check_shape("acts", acts, ("N", "F"), sizes)
    check_shape("w_dec", w_dec, ("F", "C"), sizes)
    residual = out - x                                                  # (N, C)
    row_norms = np.sqrt(np.sum(w_dec * w_dec, axis=-1))                 # (F, C) -> (F,)
    ctx = SAELossCtx(residual, acts, w_dec, row_norms, float(l1))
    mse, penalty = sae_loss_parts(ctx)
    return mse + penalty, ctx


def sae_loss_parts(ctx: SAELossCtx) -> tuple[float, float]:
    """(mse, l1 penalty) of a loss ctx, each averaged over rows as SAELens logs them."""
    rows = ctx.residual.shape[0]
    mse = float(np.sum(ctx.residual * ctx.residual)) / rows
    if ctx.l1 == 0.0:
        return mse, 0.0
    weighted = np.abs(ctx.acts) @ ctx.row_norms                         # (N, F) @ (F,) -> (N,)
    return mse, ctx.l1 * float(np.sum(weighted)) / rows


def sae_loss_backward(dloss: float, ctx: SAELossCtx
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dx, dout, dacts, dw_dec): dx is the gradient through the target only."""
    rows = ctx.residual.shape[0]
    dout = (2.0 * dloss / rows) * ctx.residual                          # (N, C)
    dx = -dout
    if ctx.l1 == 0.0:
        return dx, dout, np.zeros_like(ctx.acts), np.zeros_like(ctx.w_dec)
    scale = dloss * ctx.l1 / rows
    dacts = scale * np.sign(ctx.acts) * ctx.row_norms                   # (N, F) * (F,)
    mass = np.sum(np.abs(ctx.acts), axis=0)                             # (N, F) -> (F,)
    # d ||w_f|| / d w_f = w_f / ||w_f||; a zero row has no direction, so no gradient
    safe = np.where(ctx.row_norms > 0, ctx.row_norms, 1.0)
    dw_dec = (scale * mass / safe)[:, None] * ctx.w_dec                 # (F,) -> (F, C)
    return dx, dout, dacts.astype(ctx.acts.dtype), dw_dec.astype(ctx.w_dec.dtype)
