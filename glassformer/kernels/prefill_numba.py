"""Causal attention for a long prefill: BLAS products around one compiled pass per score chunk,
the twin of ops/tiled_attention.py's forward (read that first: same numbers, same ctx).

    tiled_attention_forward(q, k, v, **options) -> (out, TiledAttentionCtx)
        the twin's name, arguments and results; the compiled path when `supports(q, k, v,
        options)`: float32, q (N, K, G, T, D), k and v (N, K, 1, S, D) (blocks/attention.py's
        grouped layout) with S >= T, causal (a window allowed), no mask, bias, soft cap or sinks;
        anything else runs the twin. The ctx holds the same out and lse, so the twin's backward
        runs from it (training).
    causal_attention(q, k, v, scale, window) -> (out, lse)
        the compiled path itself: q (N, K, G, T, D), k (N, K, S, D), v (N, K, S, Dv)

Where the NumPy twin's time goes (docs/performance.md, a 4,096-token SmolLM2 prefill): its two
products run at BLAS speed, but between them each (128 x 256) tile makes separate passes in
memory (the causal bias, exp, the row sum, the product's sum into the accumulator), one Python
round per tile. Here:

  - the G query heads of one KV head and a tile of query rows are one matrix: Q is laid out
    (N, K, T, G, D), so rows [t0, t1) of all G heads are one (bT * G, D) block and K and V are
    read once for the G heads (grouped-query attention, K/V never repeated);
  - each query tile meets its keys in chunks of up to KEY_CHUNK: one BLAS product for the
    scores (bT * G, chunk), one compiled pass (`exp_rows`) that writes 2^score in place with the
    causal (and window) rule applied and adds each row's sum, one BLAS product P V into the
    tile's output: three calls per chunk, the chunk (~1 MiB) staying in L2 between them;
  - no running max. Q is multiplied by scale * log2(e) once, so the weights are 2^score2; the
    sums of 2^score2 over the chunks are exact sums of the softmax's terms with shift 0, which
    is what the twin's first try does too (`_query_tile_unshifted`): a row whose sum leaves
    [2^-64, 2^64] (scores beyond about +-44) is redone by the twin itself, the whole query tile,
    so a model with huge scores is slower here, never wrong.

`_exp2` is 2^x as a polynomial and an exponent written into the float's bits (Cephes' exp2f,
within 2 ulp), which the compiler vectorizes; numba's own exp is one libm call per number.
Sums run in another order than NumPy's: the twins agree to float32 rounding
(tests/kernels/test_prefill_kernels.py), not bit for bit.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from glassformer.ops.attention import check_window
from glassformer.ops.tiled_attention import TiledAttentionCtx
from glassformer.ops.tiled_attention import tiled_attention_forward as twin_forward

FAST = {"reassoc", "contract", "arcp"}   # reorder sums, fuse multiply-adds; keep inf/NaN rules
jit = numba.njit(cache=True, fastmath=FAST, nogil=True)

QUERY_ROWS = 384   # rows of one query tile: bT query positions x G heads, bT = 384 // G (>= 32)
KEY_CHUNK = 1024   # keys per chunk: a (384, 1024) float32 score chunk is 1.5 MiB, inside L2
SAFE_SUM = 2.0 ** -64   # a row's sum of 2^score must lie in [SAFE_SUM, 1 / SAFE_SUM]

LOG2E = 1.0 / math.log(2.0)
F0, F1, HALF = np.float32(0.0), np.float32(1.0), np.float32(0.5)
LOWEST, HIGHEST = np.float32(-127.0), np.float32(127.0)
# Cephes exp2f: 2^r = 1 + r P(r) for r in [-0.5, 0.5]
P0, P1, P2 = np.float32(1.535336188319500e-4), np.float32(1.339887440266574e-3), \
    np.float32(9.618437357674640e-3)
P3, P4, P5 = np.float32(5.550332471162809e-2), np.float32(2.402264791363012e-1), \
    np.float32(6.931472028550421e-1)


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float32 whose 32 bits are the int32 `bits` (a bit cast, no conversion)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@jit
def _exp2(x):
    """2^x, float32: 2^n (n = round(x), written into the exponent bits) times 2^r (r = x - n in
    [-0.5, 0.5], a polynomial). x is clamped to [-127, 127]: 0 below (and for -inf), 2^127
    above, which the caller's range check then rejects."""
    x = min(max(x, LOWEST), HIGHEST)
    n = np.floor(x + HALF)
    r = x - n
    poly = ((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5
    scale = _float_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))   # 2^n; n=-127: 0
    return (F1 + r * poly) * scale


@jit
def exp_rows(scores, group, first_position, first_key, window, total):
    """scores (R, W) -> 2^scores in place, 0 where the row may not look; total (R,) += row sums.

    Row r is query position first_position + r // group (G heads per position), column j is key
    first_key + j. A query sees the keys at or before its position, and with a window (> 0) only
    the last `window` of them: ops/attention.py's rule, end-aligned by the caller."""
    rows, width = scores.shape
    for r in range(rows):
        position = first_position + r // group
        stop = min(width, position - first_key + 1)              # keys <= position
        start = 0 if window == 0 else min(max(0, position - window + 1 - first_key), width)
        stop = max(stop, start)
        row = scores[r]
        row[:start] = F0
        row[stop:] = F0
        seen = row[start:stop]          # a view: indices from 0, which the compiler vectorizes
        added = F0
        for j in range(seen.shape[0]):
            e = _exp2(seen[j])
            seen[j] = e
            added += e
        total[r] += added


def supports(q: np.ndarray, k: np.ndarray, v: np.ndarray, options: dict) -> bool:
    """Whether a call can take the compiled path: float32 q (N, K, G, T, D), k and v
    (N, K, 1, S, D) with S >= T, causal, no mask, bias, soft cap or sinks (a window may be set).
    Anything else goes to the twin, which also raises the errors for bad input."""
    return (all(isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == 5
                for x in (q, k, v))
            and k.shape[:3] == v.shape[:3] == q.shape[:2] + (1,) and k.shape[3] == v.shape[3]
            and k.shape[4] == q.shape[4] and k.shape[3] >= q.shape[3] >= 1
            and options.get("causal") is True
            and all(options.get(name) is None for name in ("mask", "bias", "softcap", "sinks")))


def tiled_attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                            **options) -> tuple[np.ndarray, TiledAttentionCtx]:
    """ops/tiled_attention.py's tiled_attention_forward, same arguments and results: the
    compiled path when `supports` says so, else the twin itself."""
    if not supports(q, k, v, options):
        return twin_forward(q, k, v, **options)
    window = check_window(options.get("window"))
    scale = options.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, lse = causal_attention(q, k[:, :, 0], v[:, :, 0], scale, window)
    return out, TiledAttentionCtx(q=q, k=k, v=v, out=out, lse=lse, scale=scale, mask=None,
                                  causal=True, window=window, softcap=None, sinks=None,
                                  bias=None)


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                     window: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(out, lse) of causal attention by query tiles and key chunks: q (N, K, G, T, D),
    k (N, K, S, D), v (N, K, S, Dv) -> out (N, K, G, T, Dv), lse (N, K, G, T, 1)."""
    n, n_kv, group, t, d = q.shape
    s, dv = k.shape[2], v.shape[3]
    offset = s - t                                       # query i sits at position i + offset
    # (N, K, T, G, D): a tile's rows of all G heads are one block; times scale * log2(e)
    q2 = np.multiply(np.swapaxes(q, 2, 3), np.float32(scale * LOG2E), dtype=np.float32)
    out = np.empty((n, n_kv, t, group, dv), np.float32)  # (N, K, T, G, Dv), swapped back below
    lse = np.empty((n, n_kv, t, group), np.float32)
    span = max(32, QUERY_ROWS // group)                  # query positions per tile
    scratch = np.empty(span * group * min(KEY_CHUNK, s), np.float32)
    for b in range(n):
        for kv in range(n_kv):
            k_t = np.ascontiguousarray(k[b, kv].T)       # (D, S)
            for t0 in range(0, t, span):
                t1 = min(t0 + span, t)
                rows = (t1 - t0) * group
                tile_out, tile_lse = _query_tile(q2[b, kv, t0:t1].reshape(rows, d), k_t,
                                                 v[b, kv], t0 + offset, group, window, scratch)
                if tile_out is None:                     # a row's sum out of range: the twin
                    tile_out, tile_lse = _twin_tile(q, k, v, b, kv, t0, t1, offset, scale,
                                                    window)
                out[b, kv, t0:t1] = tile_out.reshape(t1 - t0, group, dv)
                lse[b, kv, t0:t1] = tile_lse.reshape(t1 - t0, group)
    return np.swapaxes(out, 2, 3), np.swapaxes(lse, 2, 3)[..., None]


def _query_tile(q_rows: np.ndarray, k_t: np.ndarray, v: np.ndarray, first_position: int,
                group: int, window: int | None, scratch: np.ndarray):
    """One query tile: q_rows (R, D) (row r: position first_position + r // G), k_t (D, S),
    v (S, Dv) -> (out (R, Dv), lse (R,)), or (None, None) when a row's sum is out of range."""
    rows = q_rows.shape[0]
    last_position = first_position + (rows - 1) // group
    first = 0 if window is None else max(0, first_position - window + 1)
    stop = last_position + 1                             # keys [first, stop) are seen by a row
    acc = np.zeros((rows, v.shape[1]), np.float32)       # sum of 2^score v
    total = np.zeros(rows, np.float32)                   # sum of 2^score
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is caught below
        for k0 in range(first, stop, KEY_CHUNK):
            k1 = min(k0 + KEY_CHUNK, stop)
            scores = np.matmul(q_rows, k_t[:, k0:k1],
                               out=scratch[:rows * (k1 - k0)].reshape(rows, k1 - k0))
            exp_rows(scores, group, first_position, k0, 0 if window is None else window, total)
            acc += scores @ v[k0:k1]                     # (R, chunk) @ (chunk, Dv)
    if not (np.all(total >= SAFE_SUM) and np.all(total <= 1.0 / SAFE_SUM)):
        return None, None
    return acc / total[:, None], np.log(total)   # sum 2^score2 = sum e^score


def _twin_tile(q, k, v, b, kv, t0, t1, offset, scale, window):
    """Rows [t0, t1) of head group (b, kv) by the NumPy twin, laid out as _query_tile's."""
    stop = t1 + offset                                   # end-aligned: the last row sees stop
    out, ctx = twin_forward(q[b, kv, :, t0:t1], k[b, kv, None, :stop], v[b, kv, None, :stop],
                            causal=True, scale=scale, window=window)  # (G, bT, Dv), (G, bT, 1)
    return (np.swapaxes(out, 0, 1).reshape(-1, out.shape[-1]),
            np.swapaxes(ctx.lse[..., 0], 0, 1).reshape(-1))
