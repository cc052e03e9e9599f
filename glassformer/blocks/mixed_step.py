"""A mixed step: the running rows' decoded ids and a joining prompt's chunk in one forward.

A server that prefills a long prompt chunk by chunk between its decode steps (serve/prefill.py)
pays for each chunk as a forward of its own, and a forward of a few ids reads every weight from
memory as a decode step does: its fixed cost is about one decode step, whatever the chunk's size.
So, as vLLM does, the chunk rides in the decode step itself: the products take the running rows'
B ids and the chunk's u x c ids stacked as one (B + u c, C) matrix, each weight read once for
both; only attention is apart, each part over its own cache:

    x        = [x_dec (B, C) ; x_chunk (u c, C)]           stacked rows
    xn       = norm1(x)
    q|k|v    = xn @ [wq | wk | wv]                         one product for both parts
    out_dec  = attend_step(q[:B], ...)                     each row over its row of the shared
                                                           cache, its key written at `length`
    out_ch   = attention(q[B:] ...)                        the chunk causally over its small
                                                           cache's prefix and itself, its keys
                                                           written at the small cache's `length`
    a        = [out_dec ; out_ch] @ wo                     one product
    h, hn    = add_norm_rows(x, a, bo, norm2)
    m        = mlp(hn) @ w_down                            one product each
    x, xn    = add_norm_rows(h, m, b_down, next norm1)

The layer is blocks/decode_step.py's (the same kernels module and DecodePlan operands), so it
applies where `decode_step_applies` does. A weight kept in GGUF blocks (SmolLM2's Q4_1) is
multiplied 16 rows a call (`product`): each call takes the compiled kernel a decode step takes,
whose cost grows with the rows, instead of the path the matrix picks past 16 rows (every block
widened into float32 slabs, then many small BLAS products), which costs a fixed part at every
weight: on the loaded 2-core machine, profiled, a 23-row mixed step took ~16 s on the slabs
against 2-4 s for a decode step, and the cost jumps where the path changes, which the budget's
line cannot follow; the chunk's attention is blocks/attention.py's for a
cached causal forward (left-padded rows masked by key_mask, RoPE at each id's position). Every
number is the one the two forwards would give apart, to float32 rounding of the products' shapes.
"""
from __future__ import annotations

from types import ModuleType

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.decode_plan import DecodePlan, LayerOperands
from glassformer.blocks.decode_step import MLPS
from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.prefill_rows import product as by_pieces
from glassformer.kernels.choice import prefill_kernels
from glassformer.ops.attention import attention_forward
from glassformer.ops.rope import rope_forward
from glassformer.ops.tiled_attention import tiled_attention_forward

TILED_FROM = 512   # chunk ids from which the chunk's attention runs tiled (blocks/attention.py's)


def product(x: np.ndarray, w) -> np.ndarray:
    """x (N, C) @ w. A weight kept in GGUF blocks (ops/quant/matrix.py): 16 rows a call, each on
    the compiled kernel a decode step takes (its cost grows with the rows, with no fixed part
    for the prefill budget to trip on); a float32 one: one BLAS product."""
    return by_pieces(x, w)


def _mlp_hidden(kernels: ModuleType, op: LayerOperands, hn: np.ndarray, cfg: BlockConfig
                ) -> np.ndarray:
    """hn (N, C) -> the MLP's hidden activations (N, F), as blocks/decode_step.py's."""
    if cfg.mlp != "swiglu":
        return kernels.gelu_rows(product(hn, op.w_up), op.b_up, MLPS[cfg.mlp])
    if op.gate_up is None:
        return kernels.swiglu_rows(product(hn, op.w_gate), product(hn, op.w_up))
    both = product(hn, op.gate_up)                                      # (N, C) -> (N, 2F)
    width = op.w_gate.shape[1]
    return kernels.swiglu_rows(both[:, :width], both[:, width:])


def _heads(x: np.ndarray, bias: np.ndarray | None, u: int, heads: int) -> np.ndarray:
    """(u c, heads D) (+ bias) -> (u, heads, c, D)."""
    if bias is not None:
        x = x + bias
    return x.reshape(u, -1, heads, x.shape[1] // heads).transpose(0, 2, 1, 3)


def _chunk_attention(op: LayerOperands, q, k, v, small: KVCache, layer: int, tables,
                     key_mask: np.ndarray, u: int) -> np.ndarray:
    """The chunk's q (u c, H D), k and v (u c, K D) -> its attention output (u c, H D); its keys
    and values written into `small` at columns [length, length + c). tables: RoPE's cos and sin
    (u, c, D) at the chunk's positions, or None. key_mask (u, length + c): live small columns."""
    n_kv = small.k[layer].shape[1]
    d = small.k[layer].shape[3]
    qh = _heads(q, op.bq, u, q.shape[1] // d)                       # (u, H, c, D)
    kh = _heads(k, op.bk, u, n_kv)                                  # (u, K, c, D)
    vh = _heads(v, op.bv, u, n_kv)
    if tables is not None:
        cos, sin = tables[0][:, None], tables[1][:, None]          # (u, 1, c, D)
        qh, kh = rope_forward(qh, cos, sin)[0], rope_forward(kh, cos, sin)[0]
    keys, values = small.write(layer, kh, vh)                       # (u, K, S, D) each
    b, n_head, c, _ = qh.shape
    grouped = qh.reshape(b, n_kv, n_head // n_kv, c, d)            # (u, K, G, c, D)
    options = dict(mask=key_mask[:, None, None, None, :], causal=True)
    if c >= TILED_FROM:                          # no weights kept: O(c) memory, as attention.py
        kernels = prefill_kernels()
        tiled = tiled_attention_forward if kernels is None else kernels.tiled_attention_forward
        out, _ = tiled(grouped, keys[:, :, None], values[:, :, None], **options)
    else:
        out, _ = attention_forward(grouped, keys[:, :, None], values[:, :, None],
                                   keep_weights=False, **options)  # (u, K, G, c, D)
    return out.reshape(b, n_head, c, d).transpose(0, 2, 1, 3).reshape(b * c, n_head * d)


def mixed_step_forward(kernels: ModuleType, plan: DecodePlan, x_dec: np.ndarray,
                       x_chunk: np.ndarray, cfg: BlockConfig, *, cache: KVCache,
                       key_mask: np.ndarray, dec_tables, small: KVCache,
                       small_mask: np.ndarray, chunk_tables) -> tuple[np.ndarray, np.ndarray]:
    """x_dec (B, C) decoded ids and x_chunk (u, c, C) a chunk through every layer -> (B, C) and
    the chunk's last column (u, C). cache: the decoded rows' (written at column cache.length,
    key_mask (B, length + 1)); small: the chunk's (written at small.length, small_mask
    (u, length + c)). dec_tables (B, D) x 2 and chunk_tables (u, c, D) x 2: RoPE's cos and sin
    at each id's position, or None. Neither cache's length is advanced (the caller does)."""
    cache.check_room(1)
    b, (u, c, width) = x_dec.shape[0], x_chunk.shape
    small.check_room(c)
    rms, eps = cfg.norm == "rms", cfg.norm_eps
    x = np.ascontiguousarray(np.concatenate([x_dec, x_chunk.reshape(u * c, width)]))  # (N, C)
    dec_cos, dec_sin = (None, None) if dec_tables is None else dec_tables
    layers = plan.layers
    xn = kernels.norm_rows(x, layers[0].norm1_w, layers[0].norm1_b, eps, rms)
    for i, op in enumerate(layers):
        if op.qkv is not None:
            qkv = product(xn, op.qkv)                                  # (N, C) -> (N, (H+2K) D)
            wq, wk = op.wq.shape[1], op.wk.shape[1]
            q, k, v = qkv[:, :wq], qkv[:, wq:wq + wk], qkv[:, wq + wk:]
        else:
            q, k, v = product(xn, op.wq), product(xn, op.wk), product(xn, op.wv)
        out = np.empty((x.shape[0], q.shape[1]), dtype=x.dtype)          # (N, H D)
        out[:b] = kernels.attend_step(
            np.ascontiguousarray(q[:b]), np.ascontiguousarray(k[:b]),
            np.ascontiguousarray(v[:b]), op.bq, op.bk, op.bv, dec_cos, dec_sin,
            cache.k[i], cache.v[i], cache.length, key_mask)               # (B, H D)
        out[b:] = _chunk_attention(op, q[b:], k[b:], v[b:], small, i, chunk_tables,
                                   small_mask, u)                         # (u c, H D)
        a = product(out, op.wo)                                                  # (N, C)
        h, hn = kernels.add_norm_rows(x, a, op.bo, op.norm2_w, op.norm2_b, eps, rms)
        m = product(_mlp_hidden(kernels, op, hn, cfg), op.w_down)         # (N, F) -> (N, C)
        if i + 1 < len(layers):
            after = layers[i + 1]
            x, xn = kernels.add_norm_rows(h, m, op.b_down, after.norm1_w, after.norm1_b, eps,
                                          rms)
        else:
            x = h + (m + op.b_down if op.b_down is not None else m)
    last = b + np.arange(u) * c + c - 1                                   # (u,) each row's last
    return x[:b], x[last]
