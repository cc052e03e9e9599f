"""Prompt chunks of several rows through every layer, each row's numbers those it gets alone.

`serve --batch-invariant` prefills its joiners together (serve/prefill.py's `Aligned`), so the
weights are read once for all of them, yet a joiner's keys and logits must be bit for bit those
of its prompt prefilled alone. Two things in a batched forward make a row's numbers depend on
the others:

    products    xn @ W over (N, C) rows: BLAS picks its path (gemv, a small-matrix kernel, gemm)
                and its blocking by N, so a row's dot products are summed in another order when
                N changes. Here every product (and every row-wise kernel) runs on tiles of
                exactly ROWS rows, the last one padded with zero rows: one shape, one path, and
                a row's result the same in any slot of a tile (tests/blocks/ check it)
    attention   one masked batch sums the zeros of masked keys where other rows' lengths put
                them, and a chunk's (T, S) shape follows where the chunk starts. Here each row
                attends alone, over its own keys, by blocks of QUERIES positions fixed from
                position 0: block b's queries (those not in this forward left as zero rows)
                against keys [0, (b + 1) QUERIES), causal. Every shape then follows from the
                position only, so a prompt id's key and output are the same bits however the
                prompt was cut into chunks, and a prefix computed by an earlier prefill can be
                reused id by id

The layer is blocks/decode_step.py's plain pre-norm layer (its kernels module: kernels/
decode_numba.py or decode_numpy.py, both row by row), for c_r ids per row instead of one:

    x (N, C)  the rows' new ids packed one after the other, padded to a multiple of ROWS
    xn        = norm1(x)                                  by tiles
    q|k|v     = xn @ [wq | wk | wv]                       by tiles
    out       per row: RoPE at its positions, its keys written at its columns, causal
              attention over its own keys by query blocks (above)
    h, hn     = add_norm_rows(x, out @ wo, bo, norm2)     by tiles
    x, xn     = add_norm_rows(h, mlp(hn) @ w_down, ...)   by tiles

The cache (KVCache with `prefill_rows`) keeps one column per position (column j holds position
j; its width a multiple of QUERIES, the columns past a prompt zeros that the causal rule masks),
and a forward writes from column `length` for every row: row r's new ids are the last c_r
columns of x, where c_r = key_mask[r].sum() - length (its keys after the forward) may be 0 for a
row whose prompt is already in. The numbers equal block_forward's to float32 rounding; what
matters is that they are the same for a row whatever rows run beside it.
"""
from __future__ import annotations

from types import ModuleType

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.decode_step import MLPS
from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.packed import packed_whole
from glassformer.ops.attention import attention_forward
from glassformer.ops.quant.matrix import COMPILED_ROWS, QuantizedMatrix
from glassformer.ops.rope import rope_forward, rope_tables_at

ROWS = 32        # rows of every product and kernel call: a fixed shape whatever the batch
QUERIES = 32     # positions of an attention block: block b is [b Q, (b + 1) Q), whatever the chunk
HEAD_ROWS = 8    # rows of the LM head's product (the last id of each row only)


def by_tiles(fn, *arrays: np.ndarray, rows: int = ROWS):
    """fn on each `rows`-row tile of arrays (N, ...), N a multiple of rows; the tiles' results
    (an array or a tuple of arrays) joined back to (N, ...)."""
    parts = [fn(*(a[i:i + rows] for a in arrays)) for i in range(0, arrays[0].shape[0], rows)]
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(group) for group in zip(*parts))
    return np.concatenate(parts)


def product(x: np.ndarray, w) -> np.ndarray:
    """x (ROWS, C) @ w: a float32 matrix in one BLAS call; a QuantizedMatrix (GGUF blocks kept)
    by COMPILED_ROWS rows at a time, so each call takes its compiled row-by-row kernel instead of
    dequantizing the whole matrix again for every tile (ops/quant/matrix.py)."""
    if not isinstance(w, QuantizedMatrix):
        return x @ w
    return np.concatenate([x[i:i + COMPILED_ROWS] @ w
                           for i in range(0, x.shape[0], COMPILED_ROWS)])


def padded(x: np.ndarray, rows: int = ROWS) -> np.ndarray:
    """x (N, C) with zero rows appended up to a multiple of `rows`: (N', C), contiguous."""
    extra = -x.shape[0] % rows
    return np.ascontiguousarray(np.concatenate([x, np.zeros((extra,) + x.shape[1:], x.dtype)]))


def _qkv(p: dict, xn: np.ndarray):
    """xn (ROWS, C) -> q (ROWS, H*D), k, v (ROWS, K*D), with their biases."""
    weights = [p["attn.wq"], p["attn.wk"], p["attn.wv"]]
    whole = packed_whole(weights)
    if whole is not None:
        qkv = product(xn, whole)                                 # (R, C) -> (R, (H+2K) D)
        a, b = weights[0].shape[1], weights[0].shape[1] + weights[1].shape[1]
        parts = [qkv[:, :a], qkv[:, a:b], qkv[:, b:]]
    else:
        parts = [product(xn, w) for w in weights]
    for i, name in enumerate(("attn.bq", "attn.bk", "attn.bv")):
        if name in p:
            parts[i] = parts[i] + p[name]
    return tuple(np.ascontiguousarray(part) for part in parts)


def _mlp_hidden(kernels: ModuleType, p: dict, hn: np.ndarray, cfg: BlockConfig) -> np.ndarray:
    """hn (ROWS, C) -> the MLP's hidden activations (ROWS, F), as blocks/decode_step.py's."""
    if cfg.mlp != "swiglu":
        return kernels.gelu_rows(product(hn, p["mlp.w_up"]), p.get("mlp.b_up"), MLPS[cfg.mlp])
    whole = packed_whole([p["mlp.w_gate"], p["mlp.w_up"]])
    if whole is None:
        return kernels.swiglu_rows(product(hn, p["mlp.w_gate"]), product(hn, p["mlp.w_up"]))
    both = product(hn, whole)                                    # (R, C) -> (R, 2F)
    width = p["mlp.w_gate"].shape[1]
    return kernels.swiglu_rows(both[:, :width], both[:, width:])


def _attend_row(q, k, v, cache: KVCache, layer: int, row: int, start: int, positions,
                cfg: BlockConfig) -> np.ndarray:
    """One row's c new ids: q (c, H*D), k and v (c, K*D) -> its attention output (c, H*D).
    Writes its keys at columns [start, start + c), then attends by query blocks (module
    docstring): block b's QUERIES queries against keys [0, (b + 1) QUERIES), causal, the
    queries of other chunks (or past the prompt) left as zero rows."""
    c, d = q.shape[0], cfg.dim_per_head
    n_kv, n_head = cache.k[layer].shape[1], q.shape[1] // d
    q = q.reshape(c, n_head, d).transpose(1, 0, 2)                  # (H, c, D)
    k = k.reshape(c, n_kv, d).transpose(1, 0, 2)                    # (K, c, D)
    if cfg.position == "rope":
        theta, scaling = cfg.rope_at(layer)
        cos, sin = rope_tables_at(positions, d, dtype=q.dtype, theta=theta, scaling=scaling)
        q, k = rope_forward(q, cos, sin)[0], rope_forward(k, cos, sin)[0]
    end = start + c
    cache.k[layer][row, :, start:end] = k
    cache.v[layer][row, :, start:end] = v.reshape(c, n_kv, -1).transpose(1, 0, 2)
    out = np.empty_like(q)                                          # (H, c, D)
    for block in range(start // QUERIES, (end - 1) // QUERIES + 1):
        first, stop = block * QUERIES, (block + 1) * QUERIES       # its positions
        lo, hi = max(first, start), min(stop, end)                  # those fed now
        queries = np.zeros((n_head, QUERIES, d), dtype=q.dtype)
        queries[:, lo - first:hi - first] = q[:, lo - start:hi - start]
        keys = np.ascontiguousarray(cache.k[layer][row, :, :stop])[None, :, None]  # (1,K,1,S,D)
        values = np.ascontiguousarray(cache.v[layer][row, :, :stop])[None, :, None]
        grouped = queries.reshape(1, n_kv, n_head // n_kv, QUERIES, d)        # (1, K, G, Q, D)
        done, _ = attention_forward(grouped, keys, values, causal=True, keep_weights=False)
        out[:, lo - start:hi - start] = done.reshape(n_head, QUERIES, d)[:, lo - first:hi - first]
    return out.transpose(1, 0, 2).reshape(c, n_head * d)


def prefill_rows_forward(kernels: ModuleType, layers: list[dict], x: np.ndarray,
                         cfg: BlockConfig, *, kv_cache: KVCache, key_mask: np.ndarray,
                         positions: np.ndarray, **_) -> np.ndarray:
    """x (B, T, C) through every layer -> (B, T, C) (padding columns: zeros); layers[i] holds
    layer i's block-local params. Row r feeds its last c_r = key_mask[r].sum() - length columns
    at positions[r] (see the module docstring); kv_cache.length is not advanced (the caller
    does)."""
    b, t, width = x.shape
    start = kv_cache.length
    counts = np.asarray(key_mask, dtype=bool).sum(axis=1) - start          # (B,) c_r
    kv_cache.check_room(int(counts.max()))
    real = np.arange(t)[None, :] >= (t - counts)[:, None]                 # (B, T) fed columns
    n = int(real.sum())
    ends = np.cumsum(counts)                                               # row r: [e - c, e)
    rms, eps = cfg.norm == "rms", cfg.norm_eps
    x_rows = padded(x[real])                                               # (N', C)
    first = layers[0]
    xn = by_tiles(lambda a: kernels.norm_rows(a, first["norm1.w"], first.get("norm1.b"),
                                              eps, rms), x_rows)
    for i, p in enumerate(layers):
        q, k, v = by_tiles(lambda a: _qkv(p, a), xn)
        out = np.zeros((x_rows.shape[0], q.shape[1]), dtype=x.dtype)       # (N', H*D)
        for row in np.flatnonzero(counts):
            lo, hi = ends[row] - counts[row], ends[row]
            out[lo:hi] = _attend_row(q[lo:hi], k[lo:hi], v[lo:hi], kv_cache, i, row, start,
                                     positions[row, t - counts[row]:], cfg)
        a = by_tiles(lambda o: product(o, p["attn.wo"]), out)
        h, hn = by_tiles(lambda r, d: kernels.add_norm_rows(
            r, d, p.get("attn.bo"), p["norm2.w"], p.get("norm2.b"), eps, rms), x_rows, a)
        m = by_tiles(lambda r: product(_mlp_hidden(kernels, p, r, cfg), p["mlp.w_down"]), hn)
        if i + 1 < len(layers):
            after = layers[i + 1]
            x_rows, xn = by_tiles(lambda r, d: kernels.add_norm_rows(
                r, d, p.get("mlp.b_down"), after["norm1.w"], after.get("norm1.b"), eps, rms),
                h, m)
        else:
            x_rows = h + (m + p["mlp.b_down"] if "mlp.b_down" in p else m)
    y = np.zeros_like(x)
    y[real] = x_rows[:n]
    return y


def prefill_rows_head(kernels: ModuleType, norm: dict, weight, x: np.ndarray,
                      cfg: BlockConfig) -> np.ndarray:
    """The final norm and LM head on tiles of HEAD_ROWS rows: x (B, 1, C) -> logits (B, 1, V).
    norm: norm_f's params ("w", maybe "b"); weight: the head's (C, V)."""
    b = x.shape[0]
    rows = padded(x.reshape(b, -1), HEAD_ROWS)                             # (B', C)
    rms = cfg.norm == "rms"
    logits = by_tiles(lambda a: product(kernels.norm_rows(a, norm["w"], norm.get("b"),
                                                          cfg.norm_eps, rms), weight),
                      rows, rows=HEAD_ROWS)
    return logits[:b, None]                                                # (B, 1, V)

