"""Scaled dot-product attention (Vaswani et al. 2017, eq. 1), forward and backward.

    scores  = Q K^T * scale (+ bias)           (..., T, D) @ (..., D, S) -> (..., T, S)
    weights = softmax(scores) over keys, masked entries exactly 0
    out     = weights V                        (..., T, S) @ (..., S, Dv) -> (..., T, Dv)

Masks follow torch's `scaled_dot_product_attention`: a boolean `mask`, True where query i may
attend to key j. `causal=True` adds the decoder rule "key j <= query i". When S > T (the queries are
the newest T of S positions, as with a KV cache) the causal rule is aligned to the end:

    T=2, S=4      key:  0 1 2 3
    query 0 (pos 2)     1 1 1 0
    query 1 (pos 3)     1 1 1 1

A sliding window (`window=W`, Mistral, Gemma 3's local layers, gpt-oss) keeps, of the causal
keys, only the W newest: key j is seen by query i when i - W < j <= i (transformers'
`sliding_window_overlay`, positions counted end-aligned as above):

    W=2, T=S=4    key:  0 1 2 3
    query 0             1 0 0 0
    query 1             1 1 0 0
    query 2             0 1 1 0          key 0 has slid out of query 2's window
    query 3             0 0 1 1

Two options change the softmax stage (ops/softcap.py, ops/sink.py): `softcap` squashes the scaled
scores into (-cap, cap) before the bias and mask (Gemma's attn_logit_softcapping), and `sinks`
joins one learned logit per head to every row, softmaxed and dropped (gpt-oss); backward then
returns dsinks too.

An optional float `bias`, broadcastable to (..., T, S), is added to the scaled scores before the
mask: ALiBi (ops/position.py: alibi_bias) or another relative-position bias. Such biases are
constants, so backward returns no gradient for them (d scores flows to Q and K only).

Causal attention over many queries (a long prompt) runs block by block, each block of queries
against only the keys it may see (`_causal_by_blocks`): about half the work, the same numbers.

A query with no allowed key outputs zeros and gets zero gradients (torch returns NaN there).
Leading dims of k and v may be 1 where q's are larger: grouped-query attention uses this to share
one K/V head across several query heads by broadcasting, with no copy; backward sums them back.

Backward, written out in docs/derivations/attention.md:

    dV       = weights^T dout
    dweights = dout V^T
    dscores  = softmax backward of dweights = weights * (dweights - rowsum(dweights * weights))
    dQ       = dscores K * scale
    dK       = dscores^T Q * scale
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, ShapeError
from glassformer.kernels.choice import train_kernels
from glassformer.ops._check import broadcasts_into, check_float, check_same_dtype, check_shape
from glassformer.ops._shapes import sum_to_shape
from glassformer.ops.sink import SinkSoftmaxCtx, sink_softmax_backward, sink_softmax_forward
from glassformer.ops.softcap import SoftcapCtx, check_cap, softcap_backward, softcap_forward
from glassformer.ops.softmax import SoftmaxCtx, softmax_backward, softmax_forward


class AttentionCtx(NamedTuple):
    """Saved by the forward.

    q, k, v:  the inputs, needed for dK, dQ and dweights (cheaper to keep than to recompute).
    scale:    the score scale (a Python float, so float32 stays float32).
    allowed:  the combined boolean mask, (T, S) or broadcastable to (..., T, S), or None.
              Backward does not read it (weights are already 0 where it is False); it is kept so
              `explain` can show what each query could see.
    softmax:  the softmax ctx, holding the attention weights (..., T, S); None when the forward
              ran with keep_weights=False (inference: then backward cannot run).
    bias:     the additive score bias or None. Backward does not read it (a constant); it is kept
              so `explain` can rebuild the pre-softmax scores.
    """
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float
    allowed: np.ndarray | None
    softmax: SoftmaxCtx | None
    bias: np.ndarray | None = None
    softcap: SoftcapCtx | None = None   # the scores' soft cap (ops/softcap.py), when set
    window: int | None = None           # the sliding window the mask applied, for `explain`



# Causal attention over more queries than this runs block by block (_causal_by_blocks).
CAUSAL_BLOCK = 128


class AttentionGrads(NamedTuple):
    """Every gradient of the backward pass, by name; `attention_backward` returns the last three."""
    dweights: np.ndarray   # (..., T, S)
    dscores: np.ndarray    # (..., T, S)
    dq: np.ndarray         # (..., T, D)
    dk: np.ndarray         # (..., S, D)
    dv: np.ndarray         # (..., S, Dv)
    dsinks: np.ndarray | None = None   # shaped as the sinks, when the forward had them


def causal_mask(t: int, s: int, window: int | None = None) -> np.ndarray:
    """(T, S) boolean mask, True where key j <= query i + (S - T) (end-aligned for S > T), and,
    with a window W, query - key < W.

    >>> causal_mask(3, 3).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    >>> causal_mask(3, 3, window=2).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    """
    query_pos = np.arange(t)[:, None] + (s - t)  # (T, 1): absolute position of each query
    key_pos = np.arange(s)[None, :]              # (1, S)
    allowed = key_pos <= query_pos               # (T, 1) vs (1, S) -> (T, S)
    if window is not None:
        allowed &= query_pos - key_pos < window  # the W newest keys only
    return allowed


def check_window(window) -> int | None:
    """A sliding window is None (full attention) or an integer >= 1."""
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise GlassformerError(f"expected a sliding window of at least 1 token, got {window!r}")
    return int(window)


def combine_masks(mask: np.ndarray | None, causal: bool, t: int, s: int,
                  window: int | None = None) -> np.ndarray | None:
    """AND together the user mask and the causal rule (and its window); None means everything
    is allowed. One query (decoding a token against a cache) is the last position: it sees every
    key, or, with a window, the W newest."""
    if not causal or (t == 1 and (window is None or s <= window)):
        return mask
    rule = causal_mask(t, s, window)
    return rule if mask is None else np.logical_and(mask, rule)


def transposed_operand(x: np.ndarray, rows: int) -> np.ndarray:
    """x^T over the last two axes, (..., S, D) -> (..., D, S), as the right operand of a product
    whose left operand has `rows` rows: a contiguous copy when there are several rows, else a view.

    note: OpenBLAS multiplies the small per-head matrices of attention faster when the right
    operand is not a transposed view, by more than the copy costs (docs/performance.md). A single
    row (decoding one token against a KV cache) is a matrix-vector product that reads x once
    anyway, so there the copy would only double the traffic.
    """
    x_t = np.swapaxes(x, -1, -2)
    return np.ascontiguousarray(x_t) if rows > 1 else x_t


def _softmax_pair():
    """(forward, backward) of the weights' softmax: the compiled pair (kernels/softmax_numba.py)
    when kernels/choice.py says so, else ops/softmax.py's, the reference. Same ctx either way."""
    compiled = train_kernels()
    if compiled is None:
        return softmax_forward, softmax_backward
    return compiled.softmax_forward, compiled.softmax_backward


def attention_scores(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """Raw scaled scores Q K^T * scale: (..., T, D) @ (..., D, S) -> (..., T, S)."""
    scores = q @ transposed_operand(k, q.shape[-2])
    scores *= scale  # in place: a Python float keeps float32 float32
    return scores


def _check_inputs(q, k, v, mask) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float(name, x)
    check_same_dtype(q=q, k=k, v=v)
    sizes: dict = {}
    check_shape("q", q, ("...", "T", "D"), sizes)
    check_shape("k", k, ("...", "S", "D"), {"D": sizes["D"]})
    check_shape("v", v, ("...", "S", "Dv"), {"S": k.shape[-2]})
    if k.shape[:-2] != v.shape[:-2]:
        raise ShapeError(f"expected k and v to share leading dims, got k {k.shape} and v {v.shape}")
    lead_q, lead_k = q.shape[:-2], k.shape[:-2]
    broadcastable = len(lead_q) == len(lead_k) and all(
        nk in (nq, 1) for nq, nk in zip(lead_q, lead_k))
    if not broadcastable:
        raise ShapeError(
            f"expected k and v leading dims to equal q's {lead_q} (or be 1 to share a head), "
            f"got q {q.shape} and k {k.shape}")
    if mask is None:
        return
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        kind = mask.dtype if isinstance(mask, np.ndarray) else type(mask).__name__
        raise GlassformerError(
            f"expected mask to be a boolean array (True = may attend), got {kind}")
    target = lead_q + (q.shape[-2], k.shape[-2])
    if not broadcasts_into(mask.shape, target):
        raise ShapeError(f"expected mask broadcastable to (..., T, S) = {target}, "
                         f"got {mask.shape}")


def _check_bias(bias, q, k) -> None:
    """A float bias of q's dtype (a float64 bias would promote float32 scores), broadcastable to
    (..., T, S) without enlarging it."""
    check_float("bias", bias)
    check_same_dtype(q=q, bias=bias)
    target = q.shape[:-1] + (k.shape[-2],)
    if not broadcasts_into(bias.shape, target):
        raise ShapeError(f"expected bias broadcastable to (..., T, S) = {target}, "
                         f"got {bias.shape}")


def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                      mask: np.ndarray | None = None, causal: bool = False,
                      scale: float | None = None, bias: np.ndarray | None = None,
                      window: int | None = None, softcap: float | None = None,
                      sinks: np.ndarray | None = None,
                      keep_weights: bool = True) -> tuple[np.ndarray, AttentionCtx]:
    """softmax(Q K^T * scale + bias, masked) V.

    window (causal only): each query sees its W newest keys. softcap: cap * tanh(scores / cap)
    before the bias and mask. sinks: one logit per head, broadcastable to (..., T, 1) (e.g.
    (H, 1, 1)), joined to each row's softmax and dropped (ops/sink.py).

    q (..., T, D), k (..., S, D), v (..., S, Dv) -> out (..., T, Dv). Default scale 1/sqrt(D).
    bias (e.g. ALiBi's (H, T, S)) broadcasts to (..., T, S); it is a constant, not differentiated.
    keep_weights=False: ctx keeps no (..., T, S) weights (a long prompt's are the largest array
    of a layer, kept for every layer until the forward ends); backward then cannot run.

    >>> q = k = v = np.eye(2)[None]
    >>> out, ctx = attention_forward(q, k, v, causal=True)
    >>> ctx.softmax.probs[0, 0].tolist()
    [1.0, 0.0]
    """
    _check_inputs(q, k, v, mask)
    if bias is not None:
        _check_bias(bias, q, k)
    window = check_window(window)
    if window is not None and not causal:
        raise GlassformerError("a sliding window applies to causal attention only")
    t, s = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    allowed = combine_masks(mask, causal, t, s, window)
    cap_ctx = None                                # the soft cap's ctx, when there is one
    if softcap is not None or sinks is not None:
        out, softmax_ctx, cap_ctx = _capped_or_sunk(q, k, v, scale, allowed, bias, softcap, sinks)
    elif causal and t > CAUSAL_BLOCK:
        weights, out = _causal_by_blocks(q, k, v, scale, allowed, bias, keep_weights, window)
        softmax_ctx = SoftmaxCtx(probs=weights)
    else:
        scores = attention_scores(q, k, scale)                # (..., T, S)
        if bias is not None:
            scores = scores + bias                 # (..., T, S) + broadcast bias -> (..., T, S)
        weights, softmax_ctx = _softmax_pair()[0](scores, mask=allowed)
        out = weights @ v                     # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)
    if not keep_weights:
        softmax_ctx = None
    ctx = AttentionCtx(q=q, k=k, v=v, scale=scale, allowed=allowed, softmax=softmax_ctx,
                       bias=bias, softcap=cap_ctx, window=window)
    return out, ctx


def _capped_or_sunk(q, k, v, scale, allowed, bias, softcap, sinks):
    """The whole (T, S) product with a soft cap and/or sinks: (out, the softmax's ctx, the soft
    cap's ctx or None). scores -> [softcap] -> [+ bias] -> softmax [with sinks] -> @ V."""
    scores = attention_scores(q, k, scale)                            # (..., T, S)
    cap_ctx = None
    if softcap is not None:
        scores, cap_ctx = softcap_forward(scores, check_cap(softcap))  # (..., T, S)
    if bias is not None:
        scores = scores + bias
    if sinks is None:
        weights, softmax_ctx = softmax_forward(scores, mask=allowed)
    else:
        weights, softmax_ctx = sink_softmax_forward(scores, sinks, mask=allowed)
    out = weights @ v                         # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)
    return out, softmax_ctx, cap_ctx


def _causal_by_blocks(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                      allowed: np.ndarray, bias: np.ndarray | None, keep_weights: bool,
                      window: int | None = None) -> tuple[np.ndarray | None, np.ndarray]:
    """Causal attention one block of CAUSAL_BLOCK queries at a time, each against only the keys
    it may see: (weights (..., T, S) or None unless kept, out (..., T, Dv)), the same numbers as
    the whole product.

        keys:       0 ........................ S
        block 0     ####                             # computed, the rest of the row stays 0
        block 1     ########
        block 2     ############
        block 3     ################

    A causal row never sees later keys, so their scores are never formed: the products and the
    softmax passes cover about half of the (T, S) square instead of all of it. With a window W,
    a block's first query sees no key before its own position - W + 1 either, so each block
    covers a band of about CAUSAL_BLOCK + W keys: linear in T, not quadratic.
    note: a loop over query blocks (T / CAUSAL_BLOCK of them), not over tokens; each block is
    still one batched product over every head.
    """
    t, s = q.shape[-2], k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    weights = np.zeros(lead + (t, s), q.dtype) if keep_weights else None  # unwritten: exact 0
    out = np.empty(lead + (t, v.shape[-1]), q.dtype)
    k_t = transposed_operand(k, t)                 # (..., S, D) -> (..., D, S), contiguous
    forward = _softmax_pair()[0]
    for start in range(0, t, CAUSAL_BLOCK):
        stop = min(start + CAUSAL_BLOCK, t)
        keys = stop + (s - t)                      # the last query of the block sees keys < this
        if keys <= 0:                              # S < T: these queries see no key at all
            out[..., start:stop, :] = 0.0
            continue
        first = 0 if window is None else max(0, start + (s - t) - window + 1)  # band's start
        cols = slice(first, keys)
        scores = q[..., start:stop, :] @ k_t[..., cols]     # (..., bT, D) @ (..., D, bS)
        scores *= scale
        if bias is not None:
            scores += _block_of(bias, start, stop, cols)
        block, _ = forward(scores, mask=_block_of(allowed, start, stop, cols))
        if weights is not None:
            weights[..., start:stop, cols] = block
        out[..., start:stop, :] = block @ v[..., cols, :]   # (..., bT, bS) @ (..., bS, Dv)
    return weights, out


def _block_of(a: np.ndarray, start: int, stop: int, cols: slice) -> np.ndarray:
    """Rows start:stop and columns `cols` of an array broadcastable to (..., T, S); an axis of
    size 1 (broadcast) is kept whole."""
    rows = slice(None) if a.shape[-2] == 1 else slice(start, stop)
    cols = slice(None) if a.shape[-1] == 1 else cols
    return a[..., rows, cols]


def attention_backward_steps(dout: np.ndarray, ctx: AttentionCtx) -> AttentionGrads:
    """The whole backward pass, keeping each named intermediate gradient (used by `explain`)."""
    if ctx.softmax is None:
        raise GlassformerError("this attention forward ran with keep_weights=False (inference): "
                               "it kept no weights to run backward with")
    weights = ctx.softmax.probs
    dv = np.swapaxes(weights, -1, -2) @ dout   # (..., S, T) @ (..., T, Dv) -> (..., S, Dv)
    v_t = transposed_operand(ctx.v, dout.shape[-2])    # (..., S, Dv) -> (..., Dv, S)
    dweights = dout @ v_t                      # (..., T, Dv) @ (..., Dv, S) -> (..., T, S)
    dsinks = None
    if isinstance(ctx.softmax, SinkSoftmaxCtx):
        dscores, dsinks = sink_softmax_backward(dweights, ctx.softmax)  # (..., T, S), sinks
    else:
        dscores = _softmax_pair()[1](dweights, ctx.softmax)         # (..., T, S)
    if ctx.softcap is not None:
        dscores = softcap_backward(dscores, ctx.softcap)            # before the cap
    dq = dscores @ ctx.k                       # (..., T, S) @ (..., S, D) -> (..., T, D)
    dq *= ctx.scale                            # in place: a fresh product, a Python float
    dk = np.swapaxes(dscores, -1, -2) @ ctx.q  # (..., S, T) @ (..., T, D) -> (..., S, D)
    dk *= ctx.scale
    # GQA: a K/V head shared by several query heads collects the gradient of every one of them.
    dk = sum_to_shape(dk, ctx.k.shape)
    dv = sum_to_shape(dv, ctx.v.shape)
    return AttentionGrads(dweights=dweights, dscores=dscores, dq=dq, dk=dk, dv=dv,
                          dsinks=dsinks)


def attention_backward(dout: np.ndarray, ctx: AttentionCtx) -> tuple[np.ndarray, ...]:
    """Returns (dq, dk, dv), shaped like the forward's q, k, v; (dq, dk, dv, dsinks) when the
    forward had sinks."""
    grads = attention_backward_steps(dout, ctx)
    if grads.dsinks is not None:
        return grads.dq, grads.dk, grads.dv, grads.dsinks
    return grads.dq, grads.dk, grads.dv
