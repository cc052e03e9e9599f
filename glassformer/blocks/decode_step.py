"""One decoded position through every layer, on the fused kernels (glassformer/kernels/).

The layer is the same pre-norm layer as blocks/residual.py's `block_forward`, for one position per
row with a KV cache (a generation step, or serve's running rows), cut into as few calls as the
math allows: four BLAS products, which read the weights, and four kernels between them, which do
everything else in one pass each.

    xn       = norm1(x)                                    (first layer; later ones get it below)
    q|k|v    = xn @ [wq | wk | wv]                         BLAS, one product when packed
    out      = attend_step(q, k, v, ...)                   + biases, RoPE, cache write, attention
    a        = out @ wo                                    BLAS
    h, hn    = add_norm_rows(x, a, bo, norm2)              h = x + a, hn = norm2(h)
    g|u      = hn @ [w_gate | w_up]   (or u = hn @ w_up)   BLAS
    hidden   = swiglu_rows(g, u)      (or gelu_rows(u, b_up))
    m        = hidden @ w_down                             BLAS
    x, xn    = add_norm_rows(h, m, b_down, next norm1)     x = h + m, and the next layer's norm

A SwiGLU layer whose w_down lies as a checkpoint loads it (W_down^T's rows contiguous: the plan's
`down_t`) makes the last three lines one call, `swiglu_down_norm_rows`: the down product is
streamed by the kernel itself, four rows of W_down^T at a time (over numba's threads when there
are several), so a layer is two BLAS products and three kernels, not four and four. A narrow
layer (SmolLM2's 30 of width 576) pays each call's fixed cost many times a token.

A weight kept in GGUF blocks (ops/quant/matrix.py's QuantizedMatrix) takes the same `xn @ w`:
its product reads the blocks (compiled, kernels/quant_numba.py, on this path). A loaded GGUF's
q | k | v and gate | up of one kind lie stacked in one blocks array (blocks/packed.py), so they
are one product each, as in float32; records of mixed kinds stay one product a weight.

One row (batch-1 decoding) whose every product matrix is float32 in a layout BLAS takes as it
lies (the plan's `whole`) goes further: the whole layer, the lines above, is one call,
`layer_step` (kernels/decode_layer_numba.py, its products NumPy's own OpenBLAS routine called
from inside the compiled loop; on the NumPy twins decode_numpy.layer_step, the same lines). A
narrow layer then pays one call's fixed cost, not seven or eight.

The weights come from a `DecodePlan` (blocks/decode_plan.py): gathered by role once per cache,
not looked up by name at every token.

`kernels` is a module with those kernels: kernels/decode_numba.py on the fast path, or
kernels/decode_numpy.py, their NumPy twins, which the tests run to check this composition
against block_forward. models/common.py's `layers_forward` is the one caller, for the layers that
`decode_step_applies` accepts; every other layer (training, prompts, LoRA, MoE, MLA, QK-norm,
post-norm, ALiBi) runs block_forward as before.
"""
from __future__ import annotations

from types import ModuleType

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.decode_plan import DecodePlan, LayerOperands
from glassformer.blocks.kv_cache import KVCache
from glassformer.kernels.choice import decode_layer_kernel

MLPS = {"swiglu": None, "gelu": False, "gelu_tanh": True}   # MLP -> gelu_rows' approximate


def decode_step_applies(cfg: BlockConfig, x: np.ndarray, *, kv_cache: KVCache | None,
                        frozen: bool, memory=None, memory_kv=None, rope_tables=None,
                        train: bool = False, **_) -> bool:
    """Whether the fused step computes these layers: one float32 position per row with a KV
    cache, inference, a plain pre-norm layer (RMSNorm or LayerNorm; RoPE or no position inside
    attention; SwiGLU or GELU), no adapters, no cross-attention, every key seen (no sliding
    window, sink, soft cap or scale other than 1/sqrt(D)), one RoPE base for every layer."""
    return (kv_cache is not None and x.shape[1] == 1 and x.dtype == np.float32
            and not frozen and not train and memory is None and memory_kv is None
            and cfg.norm_position == "pre" and cfg.norm in ("rms", "layer")
            and cfg.mla is None and cfg.moe is None and cfg.qk_norm == "none"
            and cfg.mlp in MLPS and cfg.norm_offset == 0.0
            and cfg.window is None and not cfg.attn_sinks and cfg.attn_softcap is None
            and cfg.attn_scale is None and cfg.local_rope_theta is None
            and (cfg.position == "none" or (cfg.position == "rope" and rope_tables is not None)))


def _rows_tables(rope_tables, rows: int, d: int):
    """RoPE tables (1, D) or (B, 1, D) -> (B, D) contiguous, or (None, None) without RoPE."""
    if rope_tables is None:
        return None, None
    return tuple(np.ascontiguousarray(np.broadcast_to(table.reshape(-1, d), (rows, d)))
                 for table in rope_tables)                               # (B, D) each


def _attention(kernels: ModuleType, op: LayerOperands, xn: np.ndarray, cache: KVCache,
               layer: int, tables, key_mask) -> np.ndarray:
    """xn (B, C) -> the attention sub-block's output before its bias, (B, C)."""
    if op.qkv is not None:
        qkv = xn @ op.qkv                                        # (B, C) -> (B, (H+2K) D)
        width_q, width_kv = op.wq.shape[1], op.wk.shape[1]
        q, k, v = (qkv[:, :width_q], qkv[:, width_q:width_q + width_kv],
                   qkv[:, width_q + width_kv:])                   # views
    else:
        q, k, v = xn @ op.wq, xn @ op.wk, xn @ op.wv             # (B, H*D), (B, K*D) x 2
    out = kernels.attend_step(q, k, v, op.bq, op.bk, op.bv, *tables, cache.k[layer],
                              cache.v[layer], cache.length, key_mask)   # (B, H*D)
    return out @ op.wo                                           # (B, H*D) -> (B, C)


def _gate_up(op: LayerOperands, hn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hn (B, C) -> gate, up (B, F): one product when packed (views of its output), else two."""
    if op.gate_up is None:
        return hn @ op.w_gate, hn @ op.w_up
    both = hn @ op.gate_up                                       # (B, C) -> (B, 2F)
    width = op.w_gate.shape[1]
    return both[:, :width], both[:, width:]


def _mlp_hidden(kernels: ModuleType, op: LayerOperands, hn: np.ndarray, cfg: BlockConfig
                ) -> np.ndarray:
    """hn (B, C) -> the MLP's hidden activations (B, F)."""
    if cfg.mlp != "swiglu":
        return kernels.gelu_rows(hn @ op.w_up, op.b_up, MLPS[cfg.mlp])
    return kernels.swiglu_rows(*_gate_up(op, hn))


def decode_step_forward(kernels: ModuleType, plan: DecodePlan, x: np.ndarray,
                        cfg: BlockConfig, *, kv_cache: KVCache, key_mask: np.ndarray | None = None,
                        rope_tables=None, **_) -> np.ndarray:
    """x (B, 1, C) through every layer -> (B, 1, C); plan.layers[i] holds layer i's operands
    (blocks/decode_plan.py). Writes each layer's new key and value into kv_cache at column
    kv_cache.length (which it does not advance: the generate loop does)."""
    kv_cache.check_room(1)
    rows, width = x.shape[0], x.shape[2]
    rms, eps = cfg.norm == "rms", cfg.norm_eps
    tables = _rows_tables(rope_tables, rows, cfg.dim_per_head)
    if key_mask is not None:
        key_mask = np.asarray(key_mask, dtype=bool)
    x = np.ascontiguousarray(x.reshape(rows, width))             # (B, 1, C) -> (B, C)
    layers = plan.layers
    xn = kernels.norm_rows(x, layers[0].norm1_w, layers[0].norm1_b, eps, rms)
    # one row, every product a float32 matrix BLAS takes as it lies: a layer is one call
    whole = _layer_kernel(kernels) if rows == 1 and plan.whole else None
    for i, op in enumerate(layers):
        if whole is not None:
            after = layers[i + 1] if i + 1 < len(layers) else None
            x, xn = _whole_layer(whole, op, x, xn, kv_cache, i, tables, key_mask, after, cfg)
            continue
        a = _attention(kernels, op, xn, kv_cache, i, tables, key_mask)
        h, hn = kernels.add_norm_rows(x, a, op.bo, op.norm2_w, op.norm2_b, eps, rms)  # (B, C)
        # the last layer: no next norm (the head's own follows: models/common.py head_forward)
        after = layers[i + 1] if i + 1 < len(layers) else None
        x, xn = _mlp_end(kernels, op, hn, h, after, cfg)         # (B, C) each
    return x[:, None]                                            # (B, C) -> (B, 1, C)


def _layer_kernel(kernels: ModuleType):
    """The whole-layer function that goes with `kernels`: the NumPy twins' own layer_step, or
    for the compiled ones decode_layer_numba's (kernels/choice.py; None where NumPy's BLAS
    cannot be called from a compiled loop: then the layer goes call by call)."""
    own = getattr(kernels, "layer_step", None)
    return own if own is not None else decode_layer_kernel()


def _whole_layer(whole, op: LayerOperands, x: np.ndarray, xn: np.ndarray, cache: KVCache,
                 layer: int, tables, key_mask, after: LayerOperands | None, cfg: BlockConfig
                 ) -> tuple[np.ndarray, np.ndarray]:
    """x, xn = norm1(x) (1, C) -> the layer's output and the next layer's norm1 of it, by the
    kernels' `layer_step` (decode_numpy.layer_step: the lines of the module docstring, one call)."""
    swiglu = cfg.mlp == "swiglu"
    mlp = 0 if swiglu else 1 + bool(MLPS[cfg.mlp])               # 0 SwiGLU, 1 GELU, 2 tanh GELU
    w, b = (None, None) if after is None else (after.norm1_w, after.norm1_b)
    return whole(x, xn, op.qkv, op.wq.shape[1], op.wk.shape[1], op.bq, op.bk, op.bv, *tables,
                 cache.k[layer], cache.v[layer], cache.length, key_mask, op.wo, op.bo,
                 op.norm2_w, op.norm2_b, op.gate_up if swiglu else op.w_up, op.b_up, mlp,
                 op.w_down, op.b_down, op.down_t is not None, w, b, cfg.norm_eps,
                 cfg.norm == "rms")


def _mlp_end(kernels: ModuleType, op: LayerOperands, hn: np.ndarray, h: np.ndarray,
             after: LayerOperands | None, cfg: BlockConfig) -> tuple[np.ndarray, np.ndarray]:
    """hn, h (B, C) -> x = h + mlp(hn), and the next layer's norm1(x) ((B, 0) after the last).
    A SwiGLU with W_down^T lying row by row (op.down_t) ends in one call, its down product
    included (swiglu_down_norm_rows); otherwise the hidden @ w_down product and add_norm_rows."""
    rms, eps = cfg.norm == "rms", cfg.norm_eps
    w, b = (None, None) if after is None else (after.norm1_w, after.norm1_b)
    if cfg.mlp == "swiglu" and op.down_t is not None:
        gate, up = _gate_up(op, hn)
        return kernels.swiglu_down_norm_rows(gate, up, op.down_t, op.b_down, h, w, b, eps, rms)
    m = _mlp_hidden(kernels, op, hn, cfg) @ op.w_down            # (B, F) -> (B, C)
    if after is not None:
        return kernels.add_norm_rows(h, m, op.b_down, w, b, eps, rms)
    if op.b_down is not None:
        m = m + op.b_down
    return h + m, np.empty((h.shape[0], 0), h.dtype)
