"""Tiled attention (FlashAttention, Dao et al. 2022; its backward as in FlashAttention-2, Dao
2023), forward and backward: the numbers of ops/attention.py without ever forming (T, S).

Queries are cut into tiles of QUERY_TILE rows and keys into tiles of KEY_TILE columns. Each query
tile walks its key tiles keeping, per row, a running max m, a running sum l of exp(score - m) and
a running output acc = sum exp(score - m) v; a new tile with a larger max rescales the old l and
acc by exp(m_old - m_new) (the online softmax). At the end out = acc / l, exactly the softmax's
output, and the row's logsumexp lse = m + log l is saved instead of the weights:

    memory   whole op: (T, S) weights kept for backward    tiled: (T, 1) lse + (bT, bS) per tile
    backward p = exp(score - lse) recomputed tile by tile, D = rowsum(dout * out) once:
             dV += p^T dout,  dP = dout V^T,  dS = p * (dP - D),  dQ += dS K s,  dK += dS^T Q s

Derivation (why the online softmax is exact, why D replaces rowsum(dP * p)):
docs/derivations/tiled_attention.md.

Supports what ops/attention.py supports: a boolean mask broadcastable to (..., T, S), causal
(end-aligned when S > T), a sliding window, a float bias, a soft cap and sinks. A causal (or
windowed) query tile only visits the key tiles it may see, and builds a mask only for tiles that
cross the diagonal or the window's edge. A row that sees no key (and has no sink) outputs zeros
and gets zero gradients, as in ops/attention.py.
Leading dims of k and v may be 1 where q's are larger (grouped-query heads), as there.
note: loops over tiles (the algorithm), never over heads or tokens: each tile is one batched
product over every leading dim.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, ShapeError
from glassformer.ops._check import broadcasts_into, check_float, check_same_dtype
from glassformer.ops._rows import row_sum
from glassformer.ops._shapes import sum_to_shape
from glassformer.ops.attention import _block_of, _check_bias, _check_inputs, check_window
from glassformer.ops.softcap import check_cap
from glassformer.ops.softmax import SAFE_ROW_SUM, masked_logits, row_max

QUERY_TILE = 128   # rows per query tile
KEY_TILE = 256     # keys per key tile: an (H, 128, 256) float32 tile is about 1 MiB, L2-sized
# Backward keeps ~4 tiles alive at once (scores/probs, dprobs/dscores, the soft cap's tanh), so
# its tiles are smaller; the saved lse is per row, so the two passes need not share a tiling.
BACKWARD_QUERY_TILE = 64
BACKWARD_KEY_TILE = 128


class TiledAttentionCtx(NamedTuple):
    """Saved by the forward: O(T) per head, never (T, S).

    q, k, v: the inputs (backward recomputes each tile's scores from them).
    out:     the output (..., T, Dv), for D = rowsum(dout * out).
    lse:     each row's logsumexp (..., T, 1), over its allowed keys and its sink; +inf for a row
             that saw nothing, so exp(score - lse) is 0 there.
    The rest are the forward's options, to rebuild each tile the same way.
    """
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    out: np.ndarray
    lse: np.ndarray
    scale: float
    mask: np.ndarray | None
    causal: bool
    window: int | None
    softcap: float | None
    sinks: np.ndarray | None
    bias: np.ndarray | None


class _Tile(NamedTuple):
    """One (query tile, key tile) pair: rows [q0, q1), keys [k0, k1)."""
    q0: int
    q1: int
    k0: int
    k1: int


class _Work(NamedTuple):
    """What every tile of one call reads, made once: Q * scale (..., T, D), K^T (..., D, S), the
    causal biases by diagonal (_rule_bias), and flat scratch arrays the forward reuses for each
    tile's scores and P V product (None: allocate per tile, as backward does), with the leading
    dims of those two products (q's and k's broadcast, then that and v's)."""
    q_scaled: np.ndarray
    k_t: np.ndarray
    biases: dict
    scores: np.ndarray | None = None
    products: np.ndarray | None = None
    score_lead: tuple = ()
    product_lead: tuple = ()


def _into(flat: np.ndarray | None, shape: tuple) -> np.ndarray | None:
    """A view of the scratch array `flat` as `shape`, or None when it has no room (or is None)."""
    if flat is None or math.prod(shape) > flat.size:
        return None
    return flat[:math.prod(shape)].reshape(shape)


def _key_range(q0: int, q1: int, t: int, s: int, causal: bool, window: int | None):
    """[first, stop) of the keys any query in rows [q0, q1) may see (end-aligned positions)."""
    if not causal:
        return 0, s
    offset = s - t                                   # query i sits at position i + offset
    stop = min(s, q1 + offset)                       # the last row sees keys <= q1 - 1 + offset
    first = 0 if window is None else max(0, q0 + offset - window + 1)
    return first, stop


def tiles(t: int, s: int, causal: bool, window: int | None,
          query_tile: int = QUERY_TILE, key_tile: int = KEY_TILE):
    """Every (query tile, key tile) pair that holds at least one allowed entry, by query tile:
    a list of (q0, q1, [_Tile, ...])."""
    plan = []
    for q0 in range(0, t, query_tile):
        q1 = min(q0 + query_tile, t)
        first, stop = _key_range(q0, q1, t, s, causal, window)
        row = [_Tile(q0, q1, k0, min(k0 + key_tile, stop)) for k0 in range(first, stop, key_tile)]
        plan.append((q0, q1, row))
    return plan


def _tile_rule(tile: _Tile, t: int, s: int, window: int | None) -> np.ndarray | None:
    """The causal (and window) rule on one tile, (bT, bS) bool, or None when it allows all."""
    first_query = tile.q0 + (s - t)                               # positions, end-aligned
    late = tile.k1 - 1 <= first_query                             # every key <= every query
    inside = window is None or (tile.q1 - 1 + s - t) - tile.k0 < window
    if late and inside:                                           # decided before any array
        return None
    query_pos = np.arange(tile.q0, tile.q1)[:, None] + (s - t)    # (bT, 1)
    key_pos = np.arange(tile.k0, tile.k1)[None, :]                # (1, bS)
    allowed = key_pos <= query_pos                                # (bT, bS)
    if window is not None:
        allowed &= query_pos - key_pos < window
    return allowed


def _rule_bias(tile: _Tile, t: int, s: int, window: int | None, dtype, biases: dict):
    """The causal (and window) rule as an additive bias (bT, bS): 0 allowed, -inf not, or None
    when the tile allows all. The rule depends only on query position - key position, so tiles
    on the same diagonal share one bias: `biases` keeps them for the whole call (a prefill's
    diagonal tiles are all alike)."""
    key = (tile.q0 + (s - t) - tile.k0, tile.q1 - tile.q0, tile.k1 - tile.k0)
    if key not in biases:
        allowed = _tile_rule(tile, t, s, window)
        biases[key] = None if allowed is None else np.where(allowed, 0.0, -np.inf).astype(dtype)
    return biases[key]


def _tile_scores(ctx: TiledAttentionCtx, tile: _Tile, work: _Work, reuse: bool = False):
    """One tile's scores, as the whole op forms them: (scores (..., bT, bS) with -inf where not
    allowed, tanh of the soft cap or None), from work's Q * scale and K^T, made once for all
    tiles (the scale costs an O(T) pass, not one per tile). reuse: write the product into
    work.scores, overwritten by the next tile (no fresh (..., bT, bS) allocation per tile)."""
    t, s = ctx.q.shape[-2], ctx.k.shape[-2]
    q_i = work.q_scaled[..., tile.q0:tile.q1, :]                    # (..., bT, D)
    k_i = work.k_t[..., tile.k0:tile.k1]                            # (..., D, bS)
    shape = work.score_lead + (tile.q1 - tile.q0, tile.k1 - tile.k0)
    buffer = _into(work.scores, shape) if reuse else None
    scores = np.matmul(q_i, k_i, out=buffer)                        # (..., bT, bS)
    tanh = None
    if ctx.softcap is not None:
        tanh = np.tanh(scores * (1.0 / ctx.softcap))                # ops/softcap.py's rule
        scores = tanh * ctx.softcap
    cols = slice(tile.k0, tile.k1)
    if ctx.bias is not None:
        scores += _block_of(ctx.bias, tile.q0, tile.q1, cols)
    if ctx.mask is not None:
        scores = masked_logits(scores, _block_of(ctx.mask, tile.q0, tile.q1, cols))
    if ctx.causal:
        rule = _rule_bias(tile, t, s, ctx.window, scores.dtype, work.biases)  # (bT, bS) | None
        if rule is not None:
            scores += rule               # masked_logits' -inf bias, in place, made once
    return scores, tanh


def _check_tile(size) -> int:
    """A tile size is an integer >= 1."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise GlassformerError(f"expected a tile size of at least 1, got {size!r}")
    return int(size)


def _check_sinks(sinks: np.ndarray, q: np.ndarray) -> None:
    """Sinks of q's float dtype, broadcastable to (..., T, 1) (e.g. (H, 1, 1))."""
    check_float("sinks", sinks)
    check_same_dtype(q=q, sinks=sinks)
    column = q.shape[:-1] + (1,)
    if not broadcasts_into(sinks.shape, column):
        raise ShapeError(f"expected sinks broadcastable to (..., T, 1) = {column}, "
                         f"got {sinks.shape}")


def _sink_column(ctx: TiledAttentionCtx, rows: tuple) -> np.ndarray | None:
    """The sink logits broadcast to the rows' (..., bT, 1), or None without sinks."""
    if ctx.sinks is None:
        return None
    return np.broadcast_to(ctx.sinks, rows)


def tiled_attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                            mask: np.ndarray | None = None, causal: bool = False,
                            scale: float | None = None, bias: np.ndarray | None = None,
                            window: int | None = None, softcap: float | None = None,
                            sinks: np.ndarray | None = None, query_tile: int = QUERY_TILE,
                            key_tile: int = KEY_TILE) -> tuple[np.ndarray, TiledAttentionCtx]:
    """softmax(Q K^T * scale + bias, masked) V by tiles, with ops/attention.py's arguments.

    q (..., T, D), k (..., S, D), v (..., S, Dv) -> out (..., T, Dv); ctx keeps out and the
    rows' logsumexp (..., T, 1), no weights. query_tile, key_tile: the tile sizes (the result
    does not depend on them beyond rounding).

    >>> q = k = v = np.eye(2)[None]
    >>> out, ctx = tiled_attention_forward(q, k, v, causal=True)
    >>> out[0, 0].tolist()
    [1.0, 0.0]
    """
    _check_inputs(q, k, v, mask)
    if bias is not None:
        _check_bias(bias, q, k)
    window = check_window(window)
    if window is not None and not causal:
        raise GlassformerError("a sliding window applies to causal attention only")
    if sinks is not None:
        _check_sinks(sinks, q)
    t, s = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    ctx = TiledAttentionCtx(q=q, k=k, v=v, out=None, lse=None, scale=scale, mask=mask,
                            causal=causal, window=window,
                            softcap=None if softcap is None else check_cap(softcap),
                            sinks=sinks, bias=bias)
    query_tile, key_tile = _check_tile(query_tile), _check_tile(key_tile)
    lead = q.shape[:-2]
    out = np.empty(lead + (t, v.shape[-1]), q.dtype)                    # (..., T, Dv)
    lse = np.empty(lead + (t, 1), q.dtype)                              # (..., T, 1)
    # scratch for one tile's scores (..., bT, bS) and its P V (..., bT, Dv), reused by each tile
    score_lead = np.broadcast_shapes(lead, k.shape[:-2])
    product_lead = np.broadcast_shapes(score_lead, v.shape[:-2])
    scratch = min(query_tile, t)
    work = _Work(q * scale, np.ascontiguousarray(np.swapaxes(k, -1, -2)), {},    # (..., D, S)
                 np.empty(math.prod(score_lead) * scratch * min(key_tile, s), q.dtype),
                 np.empty(math.prod(product_lead) * scratch * v.shape[-1], q.dtype),
                 score_lead, product_lead)
    for q0, q1, row in tiles(t, s, causal, window, query_tile, key_tile):
        out[..., q0:q1, :], lse[..., q0:q1, :] = _query_tile(ctx, row, lead + (q1 - q0, 1),
                                                             work)
    return out, ctx._replace(out=out, lse=lse)


def _query_tile(ctx: TiledAttentionCtx, row: list, rows: tuple, work: _Work):
    """One query tile: (out (..., bT, Dv), lse (..., bT, 1)), first without a running max."""
    unshifted = _query_tile_unshifted(ctx, row, rows, work)
    if unshifted is not None:
        return unshifted
    return _query_tile_shifted(ctx, row, rows, work)


def _query_tile_unshifted(ctx: TiledAttentionCtx, row: list, rows: tuple, work: _Work):
    """The sums with shift m = 0, or None when a row's sum leaves [2^-64, 2^64].

    note: any shift gives the same softmax (docs/derivations/tiled_attention.md); 0 needs no row
    max, no rescaling and no subtraction, about half of a tile's elementwise passes. It is safe
    while no exp overflows or every term underflows, which the row sum shows afterwards, as
    ops/softmax.py's first try does; then the tile is redone with the running max (a row that
    sees no key lands there too, and outputs 0).
    """
    sink = _sink_column(ctx, rows)
    acc = np.zeros(rows[:-1] + (ctx.v.shape[-1],), ctx.q.dtype)                # (..., bT, Dv)
    with np.errstate(over="ignore", invalid="ignore"):      # an overflow is caught below
        l = np.zeros(rows, ctx.q.dtype) if sink is None else np.exp(sink)    # (..., bT, 1)
        for tile in row:
            scores, _ = _tile_scores(ctx, tile, work, reuse=True)   # (..., bT, bS)
            exps = np.exp(scores, out=scores)                       # 0 where masked
            l += row_sum(exps)
            v_i = ctx.v[..., tile.k0:tile.k1, :]                    # (..., bS, Dv)
            product = None if exps.shape[:-2] != work.score_lead else _into(
                work.products, work.product_lead + acc.shape[-2:])  # (a broadcast mask: fresh)
            acc += np.matmul(exps, v_i, out=product)                # (..., bT, Dv)
    if not (np.all(l >= SAFE_ROW_SUM) and np.all(l <= 1.0 / SAFE_ROW_SUM)):
        return None
    return acc / l, np.log(l)


def _query_tile_shifted(ctx: TiledAttentionCtx, row: list, rows: tuple, work: _Work):
    """The online softmax over one query tile's key tiles: (out (..., bT, Dv), lse (..., bT, 1)).

    m: running row max; l: running sum of exp(score - m); acc: running sum of exp(score - m) v.
    A sink starts the row as a key with no value: m = sink, l = exp(sink - m) = 1, acc = 0.
    """
    sink = _sink_column(ctx, rows)
    m = np.full(rows, -np.inf, ctx.q.dtype) if sink is None else sink.copy()   # (..., bT, 1)
    l = np.zeros(rows, ctx.q.dtype) if sink is None else np.ones(rows, ctx.q.dtype)
    acc = np.zeros(rows[:-1] + (ctx.v.shape[-1],), ctx.q.dtype)                # (..., bT, Dv)
    for tile in row:
        scores, _ = _tile_scores(ctx, tile, work)                   # (..., bT, bS)
        m_new = np.maximum(m, row_max(scores))                      # (..., bT, 1)
        shift = np.where(np.isneginf(m_new), 0.0, m_new).astype(m.dtype)  # finite: no inf - inf
        scores -= shift                                             # in place: a fresh tile
        exps = np.exp(scores, out=scores)                           # (..., bT, bS), 0 if masked
        rescale = np.exp(m - shift)                                 # old terms' new scale
        l = l * rescale + row_sum(exps)
        acc *= rescale
        acc += exps @ ctx.v[..., tile.k0:tile.k1, :]                # (..., bT, bS) @ (..., bS, Dv)
        m = m_new
    seen = l > 0                                                    # (..., bT, 1)
    out = acc / np.where(seen, l, 1.0).astype(l.dtype)              # a row that saw nothing: 0
    shift = np.where(np.isneginf(m), 0.0, m).astype(m.dtype)
    lse = np.where(seen, shift + np.log(np.where(seen, l, 1.0)), np.inf).astype(m.dtype)
    return out, lse


def tiled_attention_backward(dout: np.ndarray, ctx: TiledAttentionCtx, *,
                             query_tile: int = BACKWARD_QUERY_TILE,
                             key_tile: int = BACKWARD_KEY_TILE) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv), shaped like the forward's q, k, v; (dq, dk, dv, dsinks) with sinks.

    Each tile's weights are recomputed from the saved lse, p = exp(score - lse), and
    rowsum(dP * p) = rowsum(dout * out) = D is formed once for all tiles.
    """
    q, k, v = ctx.q, ctx.k, ctx.v
    t, s = q.shape[-2], k.shape[-2]
    lead = q.shape[:-2]
    row_dots = np.vecdot(dout, ctx.out)[..., None]                  # D: (..., T, 1)
    dq = np.zeros_like(q)                                           # (..., T, D)
    dk = np.zeros(k.shape, q.dtype)                                 # (..., S, D), k's lead
    dv = np.zeros(v.shape, q.dtype)                                 # (..., S, Dv)
    work = _Work(q * ctx.scale, np.ascontiguousarray(np.swapaxes(k, -1, -2)), {})  # (..., D, S)
    v_t = np.ascontiguousarray(np.swapaxes(v, -1, -2))              # (..., Dv, S)
    for q0, q1, row in tiles(t, s, ctx.causal, ctx.window, _check_tile(query_tile),
                             _check_tile(key_tile)):
        dout_i, q_i = dout[..., q0:q1, :], q[..., q0:q1, :]         # (..., bT, Dv), (..., bT, D)
        dots_i, lse_i = row_dots[..., q0:q1, :], ctx.lse[..., q0:q1, :]
        for tile in row:
            keys = slice(tile.k0, tile.k1)
            scores, tanh = _tile_scores(ctx, tile, work)            # (..., bT, bS)
            scores -= lse_i
            probs = np.exp(scores, out=scores)                      # the forward's weights
            dv_tile = np.swapaxes(probs, -1, -2) @ dout_i           # (..., bS, bT) @ (..., bT, Dv)
            dv[..., keys, :] += sum_to_shape(dv_tile, v.shape[:-2] + dv_tile.shape[-2:])
            dprobs = dout_i @ v_t[..., keys]                        # (..., bT, Dv) @ (..., Dv, bS)
            dprobs -= dots_i
            dscores = np.multiply(dprobs, probs, out=dprobs)        # softmax backward, with D
            if tanh is not None:
                dscores *= 1.0 - tanh * tanh                        # back through the soft cap
            dq[..., q0:q1, :] += dscores @ k[..., keys, :]          # (..., bT, bS) @ (..., bS, D)
            dk_tile = np.swapaxes(dscores, -1, -2) @ q_i            # (..., bS, bT) @ (..., bT, D)
            dk[..., keys, :] += sum_to_shape(dk_tile, k.shape[:-2] + dk_tile.shape[-2:])
    dq *= ctx.scale                                                 # d scores / d q = K * scale
    dk *= ctx.scale
    if ctx.sinks is None:
        return dq, dk, dv
    sink_probs = np.exp(_sink_column(ctx, lead + (t, 1)) - ctx.lse)  # (..., T, 1)
    dsinks = sum_to_shape(-sink_probs * row_dots, ctx.sinks.shape)   # the sink had no value
    return dq, dk, dv, dsinks
