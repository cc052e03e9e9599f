"""A long prompt through every layer with a KV cache, each layer's row-wise work split over
threads by chunks of positions: the prefill's fast path for plain pre-norm layers.

The layer is blocks/residual.py's `block_forward` (a pre-norm RMSNorm layer, RoPE, grouped
attention, SwiGLU), in the order blocks/decode_step.py cuts a decoded step, for T positions:

    stage 1, by chunks of positions:
        xn         = norm1(x)                        (the first layer; later ones: stage 3's)
        q|k|v      = xn @ [wq | wk | wv]             one BLAS product
        q, k       = RoPE(q), RoPE(k)                written straight into the queries' array
                                                      and the cache's columns (`rope_heads`)
        v                                             copied into the cache's columns
    stage 2:  out  = causal attention of q over every cached key (kernels/prefill.py: its query
                     tiles already spread over the threads)
    stage 3, by chunks of positions:
        a          = out @ wo
        h, hn      = add_norm_rows(x, a, norm2)      h = x + a, hn = norm2(h), one pass
        g|u        = hn @ [w_gate | w_up]
        m          = swiglu_rows(g, u) @ w_down
        x, xn      = add_norm_rows(h, m, next norm1) the next layer's stage 1 norm included

Why chunks over threads, not BLAS's own threads: on a 2-core machine OpenBLAS's workers spin
for ~0.1 s after each threaded product (docs/performance.md, "the prefill block"), longer than a
layer takes, so the attention's threads (kernels/spread.py) and any numba prange beside them
shared the cores with a spinning thread: the attention ran ~1.5x the CPU time it needs. Here
BLAS stays at one thread for the whole prefill and every product, norm, RoPE and SwiGLU runs on
the same `spread` threads (the caller's among them), each chunk of rows by one thread from its
norm to its last product, its rows in that core's cache: one kind of thread, three joins a
layer, as torch's one OpenMP pool. Two threads' products of half the rows each run as fast as
OpenBLAS's two threads on the whole (same GFLOP/s, measured in bench/prefill_ops.py).

`kernels` is kernels/prefill.py on the compiled path, or kernels/prefill_block_numpy.py (the
NumPy twins, which tests/blocks/ run to check this composition against block_forward). The
numbers equal block_forward's to float32 rounding. models/common.py's layers_forward is the one
caller, for the layers `prefill_block_applies` accepts; every other forward runs block_forward.
"""
from __future__ import annotations

from types import ModuleType

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.decode_plan import LayerOperands, layer_operands
from glassformer.blocks.kv_cache import KVCache
from glassformer.kernels.spread import loaded_blas, spread

PREFILL_FROM = 512      # positions: shorter prompts keep block_forward (its untiled attention)
CHUNK_ROWS = 256        # positions of a chunk at least (smaller products lose BLAS speed)
CHUNK_MOST = 1024       # and at most: a chunk's (rows, 2F) gate|up stays a few MiB a thread


def prefill_block_applies(cfg: BlockConfig, x: np.ndarray, *, kv_cache: KVCache | None,
                          frozen: bool = False, train: bool = False, memory=None,
                          memory_kv=None, key_mask=None, rope_tables=None, **_) -> bool:
    """Whether these layers take the prefill block: PREFILL_FROM or more float32 positions with
    a plain KV cache (not serve's batch-invariant one), inference, no key mask, one RoPE table
    (T, D) for every layer, a pre-norm RMSNorm layer with SwiGLU and no biases, QK-norm,
    window, sinks, soft cap, ALiBi, adapters, MLA or experts. The weights' layout is checked
    per layer (`_plain`)."""
    return (kv_cache is not None and not kv_cache.prefill_rows and not kv_cache.batch_invariant
            and not kv_cache.rings and isinstance(kv_cache.k[0], np.ndarray)
            and kv_cache.k[0].dtype == np.float32
            and x.ndim == 3 and x.shape[1] >= PREFILL_FROM and x.dtype == np.float32
            and not frozen and not train and memory is None and memory_kv is None
            and (key_mask is None or bool(np.all(key_mask)))
            and cfg.norm_position == "pre" and cfg.norm == "rms" and cfg.norm_offset == 0.0
            and cfg.mla is None and cfg.moe is None and cfg.qk_norm == "none"
            and cfg.mlp == "swiglu" and cfg.window is None and not cfg.attn_sinks
            and cfg.attn_softcap is None and cfg.local_rope_theta is None
            and cfg.position == "rope" and rope_tables is not None
            and (rope_tables[0].ndim == 2 or rope_tables[0].shape[0] == x.shape[0]))


def _plain(op: LayerOperands) -> bool:
    """A layer whose q|k|v and gate|up are packed float32 arrays and which has no bias."""
    return (all(isinstance(w, np.ndarray) and w.dtype == np.float32
                for w in (op.qkv, op.wo, op.gate_up, op.w_down))
            and all(b is None for b in (op.bq, op.bk, op.bv, op.bo, op.b_up, op.b_down)))


def layer_plan(layers: list[dict]) -> list[LayerOperands] | None:
    """Each layer's operands (blocks/decode_plan.py), or None when a layer is not plain."""
    ops = [layer_operands(p) for p in layers]
    return ops if all(_plain(op) for op in ops) else None


def _chunks(b: int, t: int, workers: int) -> list[tuple[int, int, int]]:
    """(row, first, stop) chunks of positions: about two per thread (a thread the machine
    stalls takes fewer), CHUNK_ROWS to CHUNK_MOST each; one thread: CHUNK_MOST each (the
    products as large as the layers path's, up to that)."""
    share = CHUNK_MOST if workers <= 1 else -(-t // (2 * workers))
    step = min(CHUNK_MOST, max(CHUNK_ROWS, share))
    return [(row, t0, min(t0 + step, t)) for row in range(b) for t0 in range(0, t, step)]


def prefill_block_forward(kernels: ModuleType, ops: list[LayerOperands], x: np.ndarray,
                          cfg: BlockConfig, *, kv_cache: KVCache, rope_tables, **_
                          ) -> np.ndarray:
    """x (B, T, C) through every layer -> (B, T, C); writes each layer's keys and values into
    kv_cache at columns [length, length + T) (the generate loop advances length)."""
    kv_cache.check_room(x.shape[1])
    b, t, c = x.shape
    import numba   # here only: on the compiled path it is loaded already (import glassformer
    workers = numba.get_num_threads()   # never imports it); its count follows BLAS's (choice.py)
    chunks = _chunks(b, t, workers)
    x = np.array(x, np.float32)                          # (B, T, C), ours: updated in place
    xn = np.empty_like(x)                                # the next layer's norm1(x)
    q = np.empty((b, cfg.n_head, t, cfg.dim_per_head), np.float32)   # (B, H, T, D), rotated
    with loaded_blas().limit(limits=1):
        for i, op in enumerate(ops):
            after = ops[i + 1] if i + 1 < len(ops) else None
            _layer(kernels, op, after, x, xn, q, kv_cache, i, rope_tables, cfg, chunks,
                   workers, first=i == 0)
    return x


def _layer(kernels, op, after, x, xn, q, cache, layer, tables, cfg, chunks, workers, first):
    """One layer's three stages (module docstring); x and xn updated in place."""
    heads, kv, d = cfg.n_head, cfg.kv_heads, cfg.dim_per_head
    start, t = cache.length, x.shape[1]
    k_cache, v_cache = cache.k[layer], cache.v[layer]    # (B, K, S_max, D) each
    eps = cfg.norm_eps

    def project(chunk, _):
        row, t0, t1 = chunk
        cos, sin = (table if table.ndim == 2 else table[row] for table in tables)  # (T, D)
        if first:
            xn[row, t0:t1] = kernels.norm_rows(x[row, t0:t1], op.norm1_w, None, eps, True)
        qkv = xn[row, t0:t1] @ op.qkv                               # (n, (H + 2K) D)
        n = t1 - t0
        q_part = qkv[:, :heads * d].reshape(n, heads, d)
        k_part = qkv[:, heads * d:(heads + kv) * d].reshape(n, kv, d)
        v_part = qkv[:, (heads + kv) * d:].reshape(n, kv, d)
        kernels.rope_heads(q_part, cos[t0:t1], sin[t0:t1], q[row, :, t0:t1])
        kernels.rope_heads(k_part, cos[t0:t1], sin[t0:t1],
                           k_cache[row, :, start + t0:start + t1])
        v_cache[row, :, start + t0:start + t1] = np.swapaxes(v_part, 0, 1)

    spread(chunks, project, workers, lambda: None)
    end = start + t
    group = q.reshape(q.shape[0], kv, heads // kv, t, d)          # (B, K, G, T, D)
    out, _ = kernels.tiled_attention_forward(group, k_cache[:, :, None, :end],
                                             v_cache[:, :, None, :end], causal=True,
                                             scale=cfg.attn_scale)  # (B, K, G, T, D)

    def finish(chunk, _):
        row, t0, t1 = chunk
        rows = np.moveaxis(out[row, :, :, t0:t1], 2, 0)            # (n, K, G, D), a view
        a = rows.reshape(t1 - t0, heads * d) @ op.wo                # merged heads (a copy) @ wo
        h, hn = kernels.add_norm_rows(x[row, t0:t1], a, None, op.norm2_w, None, eps, True)
        both = hn @ op.gate_up                                      # (n, 2F)
        width = both.shape[1] // 2
        m = kernels.swiglu_rows(both[:, :width], both[:, width:]) @ op.w_down   # (n, C)
        w = None if after is None else after.norm1_w
        new, new_norm = kernels.add_norm_rows(h, m, None, w, None, eps, True)
        x[row, t0:t1] = new
        if after is not None:
            xn[row, t0:t1] = new_norm

    spread(chunks, finish, workers, lambda: None)
