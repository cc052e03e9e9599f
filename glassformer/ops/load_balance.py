"""The auxiliary load-balancing loss of a Mixture-of-Experts router, and each layer's expert load.

A router sends each token to k of E experts. Left alone it learns to favour a few experts, which
then get all the gradient and the rest starve. Switch Transformer (Fedus et al. 2021, eqs. 4-6)
adds a loss that is smallest when the routed token-slots and the router's probability mass are
both spread evenly. Pooled over the L layers and the N = B*T rows (padding rows dropped):

    p_{l,n,e} = softmax(logits_{l,n,:})_e                      every expert, not only the chosen
    f_e       = #{(l, n, j): chosen_{l,n,j} = e} / R           R = L * (number of kept rows)
    P_e       = sum_{l,n} p_{l,n,e} / R
    loss      = E * sum_e f_e * P_e

f sums to k over the experts and P to 1, so a perfectly even router gives loss = k (E * E *
(k/E) * (1/E)). This is exactly `load_balancing_loss_func` of transformers 5.24 (the Qwen3-MoE,
Mixtral and OLMoE modules; the version is pinned in pyproject's test extra). Since PR #45131 its
routers return raw logits, so the loss takes one softmax; before that fix the routers returned
probabilities and the loss softmaxed them a second time, which flattened P towards 1/E.

The counts f are a step function of the logits (the top-k choice): their gradient is zero almost
everywhere, so only P carries one. Backward, with the row weight m_n (1 kept, 0 padding):

    dp_{l,n,e}      = dloss * E * f_e * m_n / R
    dlogits_{l,n,:} = softmax backward of dp_{l,n,:}

Per layer (`per_layer=True`): the Switch Transformer paper gives each MoE layer its own loss and
sums them into the model's. Pooling lets one layer's favourite expert hide behind another layer's
different favourite (the pooled f and P stay flat while each layer is skewed); per layer, f and P
are each layer's own (over its N kept rows) and the loss is their mean over the L layers, so an
even router still gives k:

    f_{l,e} = #{(n, j): chosen_{l,n,j} = e} / N      P_{l,e} = sum_n p_{l,n,e} / N
    loss    = (1 / L) * sum_l E * sum_e f_{l,e} * P_{l,e}

and backward is the same line with f_{l,e} in the place of f_e (R = L * N in both). With L = 1
the two are one loss.

`chosen` is an input, not recomputed: with DeepSeek-V3's selection bias (ops/expert_bias.py) the
chosen experts are not the top-k of the probabilities. Derivation: docs/derivations/load_balance.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, ShapeError
from glassformer.ops._check import check_float, check_shape
from glassformer.ops._ids import check_ids
from glassformer.ops.softmax import SoftmaxCtx, softmax_backward, softmax_forward


class LoadBalanceCtx(NamedTuple):
    """Saved for backward.

    softmax:   the router softmax's ctx (its probabilities (L, N, E)), for the chain rule.
    fraction:  f (1, 1, E) pooled or (L, 1, E) per layer, the routed fraction: dloss/dP = E * f.
    row_scale: (N, 1) m_n / R, each row's weight in the mean (0 for padding).
    """
    softmax: SoftmaxCtx
    fraction: np.ndarray
    row_scale: np.ndarray


def check_routing(logits: np.ndarray, chosen: np.ndarray, mask: np.ndarray | None) -> dict:
    """logits (L, N, E) float, chosen (L, N, k) expert ids in [0, E), mask None or (N,) bool.

    Returns the bound sizes {"L", "N", "E", "k"}.
    """
    check_float("logits", logits)
    sizes = check_shape("logits", logits, ("L", "N", "E"), {})
    if not isinstance(chosen, np.ndarray):
        raise GlassformerError(f"expected chosen to be a NumPy integer array, "
                               f"got {type(chosen).__name__}")
    check_shape("chosen", chosen, ("L", "N", "k"), sizes)
    if sizes["E"] == 0 or sizes["k"] == 0:
        raise ShapeError(f"expected at least one expert and one choice per row (E >= 1, k >= 1), "
                         f"got logits {logits.shape} and chosen {chosen.shape}")
    check_ids("chosen", chosen, sizes["E"], label="expert id",
              table=f"the router's E={sizes['E']} experts")
    if mask is not None:
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
            raise GlassformerError("expected mask to be a boolean array (True = a real token)")
        check_shape("mask", mask, ("N",), sizes)
    return sizes


def row_weights(mask: np.ndarray | None, n_rows: int) -> np.ndarray:
    """(N,) 1.0 for a row that counts and 0.0 for padding (float64, exact small counts)."""
    if mask is None:
        return np.ones(n_rows)
    return mask.astype(np.float64)


def expert_counts(chosen: np.ndarray, n_experts: int,
                  mask: np.ndarray | None = None) -> np.ndarray:
    """Routed token-slots per expert and layer: chosen (L, N, k) -> counts (L, E), float64.

    Padding rows (mask False) are not counted. Counts are whole numbers, exact in float64.

    >>> expert_counts(np.array([[[0, 1], [0, 2]]]), 4).tolist()
    [[2.0, 1.0, 1.0, 0.0]]
    """
    n_layer, n_rows, top_k = chosen.shape
    slot_weights = np.repeat(row_weights(mask, n_rows), top_k)             # (N,) -> (N*k,)
    # note: expert e of layer l is bin l*E + e, so one bincount counts every layer at once.
    layer_offset = (np.arange(n_layer) * n_experts)[:, None]               # (L, 1)
    bins = chosen.reshape(n_layer, n_rows * top_k) + layer_offset          # (L, N*k)
    weights = np.broadcast_to(slot_weights, bins.shape)                    # (L, N*k)
    counts = np.bincount(bins.ravel(), weights=weights.ravel(),
                         minlength=n_layer * n_experts)                    # (L*E,)
    return counts.reshape(n_layer, n_experts)                              # (L*E,) -> (L, E)


def expert_load(chosen: np.ndarray, n_experts: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Each layer's routed fraction per expert: chosen (L, N, k) -> load (L, E), rows sum to 1.

    The share of a layer's kept token-slots that went to each expert; a layer with no kept row
    has load 0. What train_log.jsonl records as `expert_load`.

    >>> expert_load(np.array([[[0, 1], [0, 2]]]), 4).tolist()
    [[0.5, 0.25, 0.25, 0.0]]
    """
    counts = expert_counts(chosen, n_experts, mask)                        # (L, E)
    slots = counts.sum(axis=1, keepdims=True)                              # (L, 1)
    return counts / np.where(slots > 0.0, slots, 1.0)


def load_balance_forward(logits: np.ndarray, chosen: np.ndarray, *,
                         mask: np.ndarray | None = None,
                         per_layer: bool = False) -> tuple[np.ndarray, LoadBalanceCtx]:
    """E * sum_e f_e * P_e, pooled over layers and kept rows, as transformers computes it, or
    with per_layer=True each layer's own loss, averaged over the layers (Switch Transformer).

    logits (L, N, E) router logits, chosen (L, N, k) expert ids, mask (N,) bool or None ->
    loss, a 0-d array of the logits' dtype. All rows padding gives 0 (transformers: NaN).

    >>> loss, _ = load_balance_forward(np.zeros((1, 4, 2)), np.array([[[0], [1], [0], [1]]]))
    >>> float(loss)    # even routing with k = 1: loss = k
    1.0
    """
    sizes = check_routing(logits, chosen, mask)
    n_layer, n_rows, n_experts = sizes["L"], sizes["N"], sizes["E"]
    weights = row_weights(mask, n_rows)                                    # (N,)
    total_rows = n_layer * float(weights.sum())                            # R
    inv_rows = 1.0 / total_rows if total_rows > 0.0 else 0.0
    probs, softmax_ctx = softmax_forward(logits)                           # (L, N, E)
    counts = expert_counts(chosen, n_experts, mask)                        # (L, E)
    row_scale = (weights * inv_rows).astype(logits.dtype)[:, None]         # (N, 1)
    if per_layer:
        # each layer's f and P over its own kept rows: R / L of them (f sums to k per layer)
        fraction = counts * (n_layer * inv_rows)                           # (L, E)
        mean_prob = (probs * row_scale).sum(axis=1) * float(n_layer)       # (L, N, E) -> (L, E)
        loss = float(n_experts) * float((fraction * mean_prob).sum()) / float(n_layer)
        saved = fraction[:, None, :]                                       # (L, E) -> (L, 1, E)
    else:
        # f: routed slots per expert pooled over layers, per kept row (sums to k over experts).
        fraction = counts.sum(axis=0) * inv_rows                           # (L, E) -> (E,)
        mean_prob = (probs * row_scale).sum(axis=(0, 1))                    # (L, N, E) -> (E,)
        loss = float(n_experts) * float(fraction @ mean_prob)
        saved = fraction[None, None, :]                                    # (E,) -> (1, 1, E)
    ctx = LoadBalanceCtx(softmax=softmax_ctx, fraction=saved.astype(logits.dtype),
                         row_scale=row_scale)
    return np.array(loss, dtype=logits.dtype), ctx


def load_balance_backward(dloss: np.ndarray, ctx: LoadBalanceCtx) -> np.ndarray:
    """dlogits (L, N, E): softmax backward of dloss * E * f * m_n / R (the counts get none)."""
    n_experts = ctx.fraction.shape[-1]
    scale = float(dloss) * float(n_experts)                                 # Python float
    dprob_of_expert = ctx.fraction * scale                                  # (1 or L, 1, E)
    dprobs = ctx.row_scale * dprob_of_expert                                # -> (1 or L, N, E)
    dprobs = np.broadcast_to(dprobs, ctx.softmax.probs.shape)               # -> (L, N, E)
    return softmax_backward(dprobs, ctx.softmax)
