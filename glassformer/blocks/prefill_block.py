"""A long prompt through every layer with a KV cache, each layer's row-wise work split over
threads by chunks of positions: the prefill's fast path for plain pre-norm layers.

The layer is blocks/residual.py's `block_forward` (a pre-norm RMSNorm layer, RoPE, grouped
attention, SwiGLU), in the order blocks/decode_step.py cuts a decoded step, for T positions:

    stage 1, by chunks of positions (the first layer; later layers' run inside stage 3):
        xn         = norm1(x)
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
        x, xn      = add_norm_rows(h, m, next norm1) the next layer's norm1 in the same pass
        then the next layer's stage 1 on the same rows (a chunk's rows need no other rows)

Why chunks over threads, not BLAS's own threads: on a 2-core machine OpenBLAS's workers spin
for ~0.1 s after each threaded product (docs/performance.md, "the prefill block"), longer than a
layer takes, so the attention's threads (kernels/spread.py) and any numba prange beside them
shared the cores with a spinning thread. Here
BLAS stays at one thread for the whole prefill and every product, norm, RoPE and SwiGLU runs on
the same `spread` threads (the caller's among them), each chunk of rows by one thread from a
layer's o product to the next layer's q|k|v, its rows in that core's cache: one kind of thread,
two joins a layer (the attention needs every row's keys), as torch's one OpenMP pool. Two
threads' products of half the rows each run as fast as OpenBLAS's two threads on the whole
(docs/performance.md: beside a spinning worker a layer's attention took 1.45x its CPU time).

`kernels` is kernels/prefill.py on the compiled path, or kernels/prefill_block_numpy.py (the
NumPy twins, which tests/blocks/ run to check this composition against block_forward). The
numbers equal block_forward's to float32 rounding. models/common.py's layers_forward is the one
caller, for the layers `prefill_block_applies` accepts; every other forward runs block_forward.
"""
from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

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


class _Prompt(NamedTuple):
    """What every chunk of every layer reads or writes: the kernels, the stream x (B, T, C),
    the rotated queries q (B, H, T, D) (one layer's at a time), the cache and where the prompt's
    columns start in it, the RoPE tables, the config."""
    kernels: ModuleType
    x: np.ndarray
    q: np.ndarray
    cache: KVCache
    start: int
    tables: tuple
    cfg: BlockConfig


def prefill_block_forward(kernels: ModuleType, ops: list[LayerOperands], x: np.ndarray,
                          cfg: BlockConfig, *, kv_cache: KVCache, rope_tables, **_
                          ) -> np.ndarray:
    """x (B, T, C) through every layer -> (B, T, C); writes each layer's keys and values into
    kv_cache at columns [length, length + T) (the generate loop advances length).

    Two joins a layer: the attention, and one stage that runs a chunk from the layer's o product
    to the next layer's q|k|v, RoPE and cache write (a chunk's rows need no other rows there)."""
    kv_cache.check_room(x.shape[1])
    b, t, _ = x.shape
    import numba   # here only: on the compiled path it is loaded already (import glassformer
    workers = numba.get_num_threads()   # never imports it); its count follows BLAS's (choice.py)
    chunks = _chunks(b, t, workers)
    q = np.empty((b, cfg.n_head, t, cfg.dim_per_head), np.float32)   # (B, H, T, D), rotated
    p = _Prompt(kernels, np.array(x, np.float32), q, kv_cache, kv_cache.length, rope_tables, cfg)
    eps = cfg.norm_eps

    def first(chunk, _):
        row, t0, t1 = chunk
        _project(p, 0, ops[0], chunk,
                 kernels.norm_rows(p.x[row, t0:t1], ops[0].norm1_w, None, eps, True))

    with loaded_blas().limit(limits=1):
        spread(chunks, first, workers, lambda: None)
        for i, op in enumerate(ops):
            out = _attention(p, i)
            after = ops[i + 1] if i + 1 < len(ops) else None

            def finish(chunk, _, i=i, op=op, after=after, out=out):
                xn = _finish(p, op, after, out, chunk)            # (n, C): next layer's norm1
                if after is not None:
                    _project(p, i + 1, after, chunk, xn)
            spread(chunks, finish, workers, lambda: None)
    return p.x


def _project(p: _Prompt, layer: int, op: LayerOperands, chunk, xn: np.ndarray) -> None:
    """Stage 1 for one chunk: xn (n, C) = norm1 of its rows -> q|k|v, RoPE on q (into p.q) and
    k (into the cache's columns), v into the cache's columns."""
    row, t0, t1 = chunk
    heads, kv, d = p.cfg.n_head, p.cfg.kv_heads, p.cfg.dim_per_head
    cos, sin = (table if table.ndim == 2 else table[row] for table in p.tables)  # (T, D)
    qkv = xn @ op.qkv                                               # (n, (H + 2K) D)
    n, columns = t1 - t0, slice(p.start + t0, p.start + t1)
    q_part = qkv[:, :heads * d].reshape(n, heads, d)
    k_part = qkv[:, heads * d:(heads + kv) * d].reshape(n, kv, d)
    v_part = qkv[:, (heads + kv) * d:].reshape(n, kv, d)
    p.kernels.rope_heads(q_part, cos[t0:t1], sin[t0:t1], p.q[row, :, t0:t1])
    p.kernels.rope_heads(k_part, cos[t0:t1], sin[t0:t1], p.cache.k[layer][row, :, columns])
    p.cache.v[layer][row, :, columns] = np.swapaxes(v_part, 0, 1)


def _attention(p: _Prompt, layer: int) -> np.ndarray:
    """Stage 2: causal attention of p.q over every key cached so far -> (B, K, G, T, D)."""
    heads, kv, d = p.cfg.n_head, p.cfg.kv_heads, p.cfg.dim_per_head
    t = p.q.shape[2]
    end = p.start + t
    group = p.q.reshape(p.q.shape[0], kv, heads // kv, t, d)        # (B, K, G, T, D)
    out, _ = p.kernels.tiled_attention_forward(
        group, p.cache.k[layer][:, :, None, :end], p.cache.v[layer][:, :, None, :end],
        causal=True, scale=p.cfg.attn_scale)                         # (B, K, G, T, D)
    return out


def _finish(p: _Prompt, op: LayerOperands, after: LayerOperands | None, out: np.ndarray,
            chunk) -> np.ndarray:
    """Stage 3 for one chunk: o, add + norm2, gate|up, SwiGLU, down, add + the next layer's
    norm1; the chunk's rows of p.x replaced. Returns that norm (n, C) ((n, 0) after the last)."""
    row, t0, t1 = chunk
    eps, kernels = p.cfg.norm_eps, p.kernels
    rows = np.moveaxis(out[row, :, :, t0:t1], 2, 0)                # (n, K, G, D), a view
    a = rows.reshape(t1 - t0, -1) @ op.wo                           # merged heads (a copy) @ wo
    h, hn = kernels.add_norm_rows(p.x[row, t0:t1], a, None, op.norm2_w, None, eps, True)
    both = hn @ op.gate_up                                          # (n, 2F)
    width = both.shape[1] // 2
    m = kernels.swiglu_rows(both[:, :width], both[:, width:]) @ op.w_down   # (n, C)
    w = None if after is None else after.norm1_w
    new, xn = kernels.add_norm_rows(h, m, None, w, None, eps, True)
    p.x[row, t0:t1] = new
    return xn
