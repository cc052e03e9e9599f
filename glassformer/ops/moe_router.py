"""The router of a mixture-of-experts layer: router logits -> scores -> top-k -> chosen weights.

For N token rows and E experts, each row keeps k of them (Shazeer et al. 2017, "Outrageously
Large Neural Networks"; Fedus et al. 2021, "Switch Transformers"):

    scores  = softmax(logits)            (Mixtral, Qwen3-MoE, OLMoE)         (N, E)
            | sigmoid(logits)            (DeepSeek-V3)
    choice  = scores + bias              bias: DeepSeek-V3's e_score_correction_bias (E,),
                                         used to choose, never to weigh
    [group-limited (DeepSeek-V3): experts in n_group groups; a group's score is the sum of its
     two best choice values; only the topk_group best groups stay eligible]
    indices = top-k of choice            (N, k), best first
    weights = scores[indices]            (N, k)
    weights = weights / sum(weights)     norm_topk_prob (Mixtral always, Qwen3-MoE/OLMoE when set)
    weights = weights * scaling          routed_scaling_factor (DeepSeek-V3)

Backward: the choice is piecewise constant, so the indices carry no gradient: nudging a logit
changes which experts win only at the measure-zero points where two choice values tie. Only the
k chosen scores of each row receive gradient; the E - k others get exactly 0 through this path,
and so does the bias. With g = dweights * scaling and w = chosen / S, S = sum of chosen:

    dchosen = (g - sum(g w)) / S         (norm_topk_prob; else dchosen = g)
    dscores = dchosen placed at indices, 0 elsewhere                    (N, E)
    dlogits = softmax_backward(dscores) | sigmoid_backward(dscores)

Through softmax, an unchosen expert's logit still gets gradient (p_j (dscore_j - <dscore, p>)
with dscore_j = 0): raising it takes probability from the chosen ones. Through sigmoid it does
not. Derivation: docs/derivations/moe.md.

ctx keeps the scores' ctx (softmax probs or sigmoid outputs, what their backward needs), the
indices, the chosen scores before normalising (for the normalisation's backward) and the static
options. The weights are HF's `router_scores` / `top_k_weights`; the indices HF's
`router_indices` / `top_k_index`, in the same best-first order as torch.topk.
Deviation: DeepSeek-V3 adds 1e-20 to the normalising sum; a sum of k sigmoids is never that
small, so the term is left out.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, check_choice
from glassformer.ops._check import check_float, check_same_dtype, check_shape
from glassformer.ops.activation import SigmoidCtx, sigmoid_backward, sigmoid_forward
from glassformer.ops.softmax import SoftmaxCtx, softmax_backward, softmax_forward

SCORINGS = ("softmax", "sigmoid")
# DeepSeek-V3 scores a group by the sum of its best two choice values (its modeling code's topk(2))
GROUP_BEST = 2


class RouterCtx(NamedTuple):
    """Saved by `router_forward`.

    scoring:  "softmax" or "sigmoid"; score: that op's ctx, whose output is the (N, E) scores.
    indices:  (N, k) int64, the chosen experts of each row, best first.
    chosen:   (N, k) the chosen scores before normalising and scaling.
    norm:     whether the chosen scores were divided by their sum.
    scaling:  routed_scaling_factor, a Python float.
    """
    scoring: str
    score: SoftmaxCtx | SigmoidCtx
    indices: np.ndarray
    chosen: np.ndarray
    norm: bool
    scaling: float


def router_scores(ctx: RouterCtx) -> np.ndarray:
    """The (N, E) scores: softmax probabilities, or sigmoid outputs (the ctx keeps them)."""
    return ctx.score.probs if ctx.scoring == "softmax" else ctx.score.out


def _top_k(choice: np.ndarray, k: int) -> np.ndarray:
    """(N, E) -> (N, k) int64 indices of the k largest per row, largest first."""
    part = np.argpartition(-choice, k - 1, axis=-1)[:, :k]                # (N, k), unordered
    values = np.take_along_axis(choice, part, axis=-1)                    # (N, k)
    order = np.argsort(-values, axis=-1, kind="stable")                   # best first
    return np.take_along_axis(part, order, axis=-1).astype(np.int64)


def _group_limited(choice: np.ndarray, n_group: int, topk_group: int) -> np.ndarray:
    """choice (N, E) with every expert outside its row's topk_group best groups set to -inf.

        experts  e0 e1 e2 e3 | e4 e5 e6 e7 | ...      n_group groups of E / n_group
        group score = sum of the group's GROUP_BEST best choice values
    """
    n, e = choice.shape
    grouped = choice.reshape(n, n_group, e // n_group)                    # (N, G, E/G)
    best = min(GROUP_BEST, e // n_group)
    group_best = np.partition(grouped, -best, axis=-1)[..., -best:]       # (N, G, best)
    group_scores = group_best.sum(axis=-1)                                # (N, G)
    kept_groups = _top_k(group_scores, topk_group)                        # (N, topk_group)
    keep = np.zeros((n, n_group), bool)
    np.put_along_axis(keep, kept_groups, True, axis=-1)                   # (N, G)
    keep = np.repeat(keep, e // n_group, axis=-1)                         # (N, G) -> (N, E)
    return np.where(keep, choice, -np.inf)


def router_forward(logits: np.ndarray, bias: np.ndarray | None = None, *, top_k: int,
                   scoring: str = "softmax", norm_topk_prob: bool = False,
                   scaling: float = 1.0, n_group: int = 1, topk_group: int = 1
                   ) -> tuple[np.ndarray, RouterCtx]:
    """logits (N, E), bias (E,) or None -> the chosen weights (N, k); the chosen experts are in
    ctx.indices (N, k). See the module docstring for each option.

    >>> w, ctx = router_forward(np.log(np.array([[0.5, 0.3, 0.2]])), top_k=2)
    >>> np.round(w, 6).tolist(), ctx.indices.tolist()
    ([[0.5, 0.3]], [[0, 1]])
    """
    sizes: dict = {}
    check_shape("logits", check_float("logits", logits), ("N", "E"), sizes)
    if bias is not None:
        check_shape("bias", check_float("bias", bias), ("E",), sizes)
        check_same_dtype(logits=logits, bias=bias)
    e = sizes["E"]
    check_choice("scoring", scoring, SCORINGS)
    if not 1 <= top_k <= e:
        raise GlassformerError(f"top_k must be between 1 and the number of experts E={e}, "
                               f"got {top_k}")
    if n_group < 1 or e % n_group or not 1 <= topk_group <= n_group:
        raise GlassformerError(f"n_group={n_group} must divide E={e} and topk_group="
                               f"{topk_group} must be between 1 and n_group")
    if scoring == "softmax":
        scores, score_ctx = softmax_forward(logits)                       # (N, E)
    else:
        scores, score_ctx = sigmoid_forward(logits)                       # (N, E)
    choice = scores if bias is None else scores + bias                    # (N, E)
    if n_group > 1:
        choice = _group_limited(choice, n_group, topk_group)
    indices = _top_k(choice, top_k)                                       # (N, E) -> (N, k)
    chosen = np.take_along_axis(scores, indices, axis=-1)                 # (N, k)
    weights = chosen / chosen.sum(axis=-1, keepdims=True) if norm_topk_prob else chosen
    weights = weights * float(scaling)
    return weights, RouterCtx(scoring, score_ctx, indices, chosen, norm_topk_prob,
                              float(scaling))


def router_backward(dweights: np.ndarray, ctx: RouterCtx
                    ) -> tuple[np.ndarray, np.ndarray]:
    """dweights (N, k) -> (dlogits (N, E), dbias (E,)). dbias is exactly 0: the bias only
    chooses (module docstring)."""
    g = dweights * ctx.scaling                                            # (N, k)
    if ctx.norm:
        total = ctx.chosen.sum(axis=-1, keepdims=True)                    # (N, 1)
        normed = ctx.chosen / total                                       # (N, k)
        dchosen = (g - np.sum(g * normed, axis=-1, keepdims=True)) / total
    else:
        dchosen = g
    scores = router_scores(ctx)
    dscores = np.zeros_like(scores)                                       # (N, E)
    # the k indices of a row are distinct, so plain assignment places each gradient once
    np.put_along_axis(dscores, ctx.indices, dchosen, axis=-1)
    if ctx.scoring == "softmax":
        dlogits = softmax_backward(dscores, ctx.score)
    else:
        dlogits = sigmoid_backward(dscores, ctx.score)
    return dlogits, np.zeros(scores.shape[-1], scores.dtype)
