"""A long prefill's fast path: each function has the name, arguments and results of its NumPy
twin and runs the twin itself for any input it does not cover (the compiled loops are in
kernels/prefill_numba.py; the products stay BLAS calls).

    tiled_attention_forward(q, k, v, **options) -> (out, TiledAttentionCtx)
        twin: ops/tiled_attention.py's (read it first: same numbers, same ctx). Covered:
        float32, q (N, K, G, T, D), k and v (N, K, 1, S, D) (blocks/attention.py's grouped
        layout) with S >= T, causal (a window allowed), no mask, bias, soft cap or sinks. The
        ctx holds the same out and lse, so the twin's backward runs from it (training).
    rope_forward(x, cos, sin) -> (out, RopeCtx)
        twin: ops/rope.py's. Covered: float32 x (B, H, T, D) of any strides, tables (T, D).
    swiglu_rows(gate, up) -> hidden
        twin: kernels/decode_numpy.py's, silu(gate) * up for (..., F) float32 (inference: no
        ctx); blocks/mlp.py calls it only for a forward no backward follows. It is
        activation_numba.py's, the same loop as training's compiled swiglu_forward.
    norm_rows, add_norm_rows, rope_heads
        blocks/prefill_block.py's row kernels (kernels/decode_numba.py's norms, prefill_numba's
        RoPE into the cache's columns); their twins: kernels/prefill_block_numpy.py.

Two threads or more (numba's count, which kernels/choice.py sets to BLAS's): the attention's
query tiles of all heads are spread over them whole, each with one-thread BLAS products
(kernels/spread.py). RoPE's and SwiGLU's rows run on one thread: numba's prange there, beside
OpenBLAS's spinning threads, made a quiet 2-core machine's prefill slower (docs/performance.md).

Where the NumPy twin's time goes (docs/performance.md, a 4,096-token SmolLM2 prefill): its two
products run at BLAS speed, but between them each (128 x 256) tile makes separate passes in
memory (the causal bias, exp, the row sum, the product's sum into the accumulator), one Python
round per tile. Here:

  - the G query heads of one KV head and a tile of query rows are one matrix: each tile copies
    its rows [t0, t1) of all G heads to one (bT * G, D) block (on its own thread, into its
    thread's buffer), so K and V are read once for the G heads (grouped-query attention, K/V
    never repeated); K is read as K^T by the product itself, not copied;
  - each query tile meets its keys in chunks of up to KEY_CHUNK: one BLAS product for the
    scores (bT * G, chunk), one compiled pass (`exp_rows`) that writes 2^score in place with the
    causal (and window) rule applied and adds each row's sum, one BLAS product P V into the
    tile's output: three calls per chunk, the chunk (~1 MiB) staying in L2 between them;
  - no running max. Q is multiplied by scale * log2(e) once, so the weights are 2^score2; the
    sums of 2^score2 over the chunks are exact sums of the softmax's terms with shift 0, which
    is what the twin's first try does too (`_query_tile_unshifted`): a row whose sum leaves
    [2^-64, 2^64] (scores beyond about +-44) is redone by the twin itself, the whole query tile,
    so a model with huge scores is slower here, never wrong.

The 2^x is kernels/exp_numba.py's exp2f (a polynomial and an exponent written into the float's
bits, within 2 ulp), which the compiler vectorizes; numba's own exp is one libm call per number.
Sums run in another order than NumPy's: the twins agree to float32 rounding
(tests/kernels/test_prefill_kernels.py), not bit for bit.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from glassformer.kernels import prefill_numba
from glassformer.kernels.activation_numba import swiglu_rows  # noqa: F401  (this module's, above)
from glassformer.kernels.decode_numba import add_norm_rows, norm_rows  # noqa: F401  (above)
from glassformer.kernels.prefill_numba import exp_rows, rope_heads  # noqa: F401
from glassformer.kernels.spread import spread
from glassformer.ops.attention import check_window
from glassformer.ops.rope import RopeCtx
from glassformer.ops.rope import rope_forward as rope_twin
from glassformer.ops.tiled_attention import TiledAttentionCtx
from glassformer.ops.tiled_attention import tiled_attention_forward as twin_forward

QUERY_ROWS = 384   # rows of one query tile: bT query positions x G heads, bT = 384 // G (>= 32)
KEY_CHUNK = 1024   # keys per chunk: a (384, 1024) float32 score chunk is 1.5 MiB, inside L2
SAFE_SUM = 2.0 ** -64   # a row's sum of 2^score must lie in [SAFE_SUM, 1 / SAFE_SUM]
LOG2E = 1.0 / math.log(2.0)


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
    k (N, K, S, D), v (N, K, S, Dv) -> out (N, K, G, T, Dv), lse (N, K, G, T, 1). The tiles
    of all heads are spread over numba's thread count (kernels/spread.py), longest first."""
    n, n_kv, group, t, d = q.shape
    s, dv = k.shape[2], v.shape[3]
    offset = s - t                                       # query i sits at position i + offset
    # each tile copies its own query rows to (bT * G, D), C order (its rows of all G heads one
    # block), times scale * log2(e) so that the weights are powers of 2: on the tile's thread,
    # not one serial pass over Q first; K is read as K^T by the product itself (no copy)
    factor = np.float32(scale * LOG2E)
    out = np.empty((n, n_kv, t, group, dv), np.float32)  # (N, K, T, G, Dv), swapped back below
    lse = np.empty((n, n_kv, t, group), np.float32)
    span = max(32, QUERY_ROWS // group)                  # query positions per tile
    # a tile's cost grows with its last position: the longest first, so none is left for last
    tiles = [(b, kv, t0) for t0 in reversed(range(0, t, span))
             for b in range(n) for kv in range(n_kv)]

    def tile(item, buffers):
        b, kv, t0 = item
        t1 = min(t0 + span, t)
        rows = (t1 - t0) * group
        scratch, q_buffer = buffers
        q_rows = q_buffer[:rows * d].reshape(t1 - t0, group, d)
        np.multiply(np.swapaxes(q[b, kv, :, t0:t1], 0, 1), factor, out=q_rows)  # (bT, G, D)
        tile_out, tile_lse = _query_tile(q_rows.reshape(rows, d), k[b, kv].T, v[b, kv],
                                         t0 + offset, group, window, scratch)
        if tile_out is None:                             # a row's sum out of range: the twin
            tile_out, tile_lse = _twin_tile(q, k, v, b, kv, t0, t1, offset, scale, window)
        out[b, kv, t0:t1] = tile_out.reshape(t1 - t0, group, dv)
        lse[b, kv, t0:t1] = tile_lse.reshape(t1 - t0, group)

    spread(tiles, tile, numba.get_num_threads(),
           lambda: (np.empty(span * group * min(KEY_CHUNK, s), np.float32),
                    np.empty(span * group * d, np.float32)))
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


def rope_forward(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, RopeCtx]:
    """ops/rope.py's rope_forward: one compiled pass for float32 x (B, H, T, D) with (T, D)
    tables (four NumPy passes and a copy for rotate_half there), else the twin."""
    arrays = (x, cos, sin)
    if not (all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrays)
            and x.ndim == 4 and cos.shape == sin.shape == x.shape[2:] and x.shape[3] % 2 == 0):
        return rope_twin(x, cos, sin)
    return prefill_numba.rope_rows(x, cos, sin), RopeCtx(cos=cos, sin=sin)
