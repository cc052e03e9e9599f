"""A long prompt through the layers in chunks of columns, as llama.cpp's n_ubatch: the same keys
written, the activations bounded by the chunk instead of the prompt.

A cached forward of T new ids (a prefill) makes every layer's activations for all T at once:
q|k|v (T, (H + 2K) D), the MLP's gate|up (T, 2F) and its hidden (T, F), a quantized weight's
float32 slab (as many rows of W as x has rows: ops/quant/product.py). For SmolLM2 at T = 512
that is ~26 MiB at the forward's peak, as much as its whole float32 KV cache. Cut into chunks
of at most CHUNK columns, each chunk is an ordinary cached forward that sees the keys the
chunks before it wrote:

    cache holds L positions; x (B, T, C), T = 300, chunks of at most 128 -> 3 of 100
    chunk 0: x[:, 0:100]    queries at L..L+99,    keys [0, L+100)   (its own written first)
    chunk 1: x[:, 100:200]  queries at L+100..199, keys [0, L+200)
    chunk 2: x[:, 200:300]  queries at L+200..299, keys [0, L+300)

Causal attention of a query reads only keys at or before its position, and each layer's keys
and values of a position depend only on that position's column below it, so every chunk's
output equals its columns of the whole forward: the same math, summed in other tile orders
(float32 rounding; tests/blocks/test_prefill_chunks.py). The chunks are equal in size
(ceil(T / CHUNK) of them), so no chunk is one column, which the fused decode step would take.

The cache's `length` says where a forward writes. Each chunk runs with it set to L + its first
column, and it is put back to L when the chunks are done (or one raised): as for an unchunked
forward, only the caller (the generate loop) advances it.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.kv_cache import KVCache

# most columns a chunk holds (llama.cpp's n_ubatch is 512 by default). 1024: every chunk of a
# longer prompt keeps 512 or more columns, so it still takes the tiled attention (TILED_FROM)
# and the prefill block (blocks/prefill_block.py, PREFILL_FROM), and a prompt of up to 1,024
# ids runs whole. Smaller chunks cost more than they save at 512 ids (SmolLM2 Q4_1, helper
# memq in docs/performance.md: peak 346 MiB whole, 330 at 256, 326 at 128, for +15% and +40%
# prefill CPU at one thread, and 2-4x the wall time at two, the chunks under TILED_FROM)
CHUNK = 1024


def chunks_apply(x: np.ndarray, *, kv_cache: KVCache | None, key_mask: np.ndarray | None = None,
                 chunk: int | None = None, train: bool = False, **_) -> bool:
    """Whether a forward of x (B, T, C) runs in chunks: a plain KV cache (no sliding-window
    ring, not serve's batch-invariant one), inference, more than `chunk` new columns, and a key
    mask, when given, covering the cached positions and the new ones. chunk: default CHUNK."""
    if kv_cache is None or type(kv_cache) is not KVCache or train:
        return False
    if kv_cache.rings or kv_cache.prefill_rows or kv_cache.batch_invariant:
        return False
    t = x.shape[1]
    if key_mask is not None and key_mask.shape[1] != kv_cache.length + t:
        return False
    return t > (CHUNK if chunk is None else chunk)


def chunk_bounds(t: int, chunk: int | None = None) -> list[tuple[int, int]]:
    """[(start, stop)] of ceil(t / chunk) near-equal chunks covering [0, t), in order (chunk:
    default CHUNK, read at the call, so a test may change it)."""
    n = -(-t // (CHUNK if chunk is None else chunk))
    edges = [t * i // n for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:]))


def prefill_in_chunks(layers, x: np.ndarray, *, kv_cache: KVCache,
                      key_mask: np.ndarray | None = None, positions: np.ndarray | None = None,
                      last_only: bool = False, chunk: int | None = None, **block_kwargs
                      ) -> np.ndarray:
    """x (B, T, C) through `layers(x_chunk, **kwargs) -> (B, c, C)` chunk by chunk -> (B, T, C),
    or (B, 1, C) with last_only (the last column's, the only one a generate step reads).

    key_mask (B, L + T) and positions (T,) or (B, T): the whole forward's, each chunk given its
    part (keys up to its end; its columns' positions). block_kwargs pass through unchanged."""
    start = kv_cache.length
    kept = []
    try:
        for a, b in chunk_bounds(x.shape[1], chunk):
            kwargs = dict(block_kwargs)
            if key_mask is not None:
                kwargs["key_mask"] = key_mask[:, :start + b]                # (B, L + b)
            if positions is not None:
                kwargs["positions"] = positions[..., a:b]                   # (b - a,), (B, b - a)
            kv_cache.length = start + a
            y = layers(x[:, a:b], kv_cache=kv_cache, **kwargs)              # (B, b - a, C)
            kept.append(y[:, -1:] if last_only else y)
    finally:
        kv_cache.length = start
    return kept[-1] if last_only else np.concatenate(kept, axis=1)
