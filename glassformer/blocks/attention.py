"""Multi-head attention block: projections, heads, optional RoPE/ALiBi, KV cache, output.

Self-attention reads keys and values from x; cross-attention from `memory` (an encoder's output).
With n_kv_head = K < H = n_head (grouped-query; K = 1 is multi-query) each K/V head serves
G = H / K consecutive query heads, as in HF's `repeat_kv`. No copy is made: queries are viewed as
(B, K, G, T, D) and keys as (B, K, 1, S, D), and NumPy broadcasts the shared head.

    query heads   q0 q1 q2 | q3 q4 q5        H = 6
    kv heads          k0   |     k1          K = 2, G = 3

Shapes: x (B, T, C) -> q (B, H, T, D), k/v (B, K, S, D) -> out (B, T, H*D) -> y (B, T, C).
Backward returns grads under the forward's param names, dx, and dmemory (cross-attention only).
Cached decoding (kv_cache given) is inference only: its ctx cannot be run backward.

Long sequences (TILED_FROM queries or more) run tiled attention (ops/tiled_attention.py) when
no one will read the weights: generation's prefill (a KV cache) and training (train=True). Its ctx
keeps each row's logsumexp, O(T), instead of the (T, S) weights; other forwards (explain, the
viewer, evaluation) keep the whole op, whose ctx holds the weights they show. On the compiled
path (kernels/choice.py) a float32 causal call runs kernels/prefill_numba.py's twin of it, whose
ctx the same backward reads.

The q, k, v projections (one joined product or three, LoRA adapters on them) are
blocks/qkv.py's; the heads are split and merged by blocks/heads.py.

QK-norm (cfg.qk_norm: blocks/qk_norm.py) normalises q and k before RoPE, per head or over the
whole projection (then before the heads are split).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.heads import merge_heads, split_heads
from glassformer.blocks.hooks import heads_view, run_hook
from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.projection import (init_projections, projection_backward,
                                           projection_forward)
from glassformer.blocks.qk_norm import (QKNormCtx, qk_norm_backward, qk_norm_forward,
                                        qk_norm_shapes)
from glassformer.blocks.qkv import qkv_backward, qkv_forward
from glassformer.errors import GlassformerError
from glassformer.kernels.choice import prefill_kernels
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.attention import AttentionCtx, attention_backward, attention_forward
from glassformer.ops.linear import LinearCtx, linear_forward
from glassformer.ops.lora import LoraLinearCtx
from glassformer.ops.position import alibi_bias
from glassformer.ops.rope import RopeCtx, rope_backward, rope_forward, rope_tables_at
from glassformer.ops.tiled_attention import (TiledAttentionCtx, tiled_attention_backward,
                                             tiled_attention_forward)

# From this many queries a prefill or training forward attends by tiles (docs/performance.md:
# measured equal to the whole op at ~256 queries, faster from 512, and O(T) memory).
TILED_FROM = 512


class AttentionBlockCtx(NamedTuple):
    qkv_proj: LinearCtx | None   # the joined projection x @ [wq | wk | wv], when used
    q_proj: LinearCtx | LoraLinearCtx | None     # otherwise the three separate ones
    k_proj: LinearCtx | LoraLinearCtx | None
    v_proj: LinearCtx | LoraLinearCtx | None
    q_rope: RopeCtx | None
    k_rope: RopeCtx | None
    attn: AttentionCtx | TiledAttentionCtx     # tiled: no weights kept (TILED_FROM)
    out_proj: LinearCtx | LoraLinearCtx
    n_head: int
    cross: bool        # keys/values came from `memory`
    cached: bool       # keys/values came from a KV cache: no backward
    qkv_adapters: dict | None = None   # joined product: {"q"/"k"/"v": LoraCtx} of its adapters
    qk_norm: QKNormCtx | None = None   # QK-norm's, when cfg.qk_norm is set


def _group(q: np.ndarray, n_kv: int) -> np.ndarray:
    """(B, H, T, D) -> (B, K, G, T, D): query head h = kv * G + g."""
    b, h, t, d = q.shape
    return q.reshape(b, n_kv, h // n_kv, t, d)


def _attention_mask(key_mask: np.ndarray | None) -> np.ndarray | None:
    """(B, S) True for real keys -> (B, 1, 1, 1, S), broadcast over K, G and T."""
    if key_mask is None:
        return None
    return key_mask[:, None, None, None, :]


def _check_inputs(x: np.ndarray, memory: np.ndarray | None, cfg: BlockConfig) -> None:
    """x (B, T, C), and memory (B, S, C) with the same B; RoPE only without memory."""
    sizes = check_shape("x", check_float("x", x), ("B", "T", "C"), {"C": cfg.d_model})
    if memory is None:
        return
    check_shape("memory", check_float("memory", memory), ("B", "S", "C"),
                {"B": sizes["B"], "C": cfg.d_model})
    if cfg.position == "rope":
        raise GlassformerError("RoPE applies to self-attention only; cross-attention keys "
                               "come from another sequence")


def _heads(params: dict, x: np.ndarray, memory: np.ndarray | None, memory_kv, cfg: BlockConfig,
           *, frozen: bool, train: bool, rng):
    """q (B, H, T, D), k and v (B, K, S, D), the projections' ctxs (qkv, q, k, v), the joined
    product's adapters and QK-norm's ctx (None without it). Keys and values come from memory_kv
    as given (decoding with cross-attention: projected once by blocks/qkv.py's `cross_kv`),
    else from memory or x."""
    if memory_kv is not None:
        q_lin, q_proj = linear_forward(x, params["wq"], params.get("bq"))   # (B, T, H*D)
        k, v = memory_kv                                                    # (B, K, S, D) each
        projections = (None, q_proj, None, None)
        return split_heads(q_lin, cfg.n_head), k, v, projections, None, None
    (q_lin, k_lin, v_lin), projections, qkv_adapters = qkv_forward(
        params, x, memory, frozen=frozen, train=train, rng=rng)
    qk = None
    if cfg.qk_norm == "proj":  # OLMoE: over the whole projection, before the heads are split
        q_lin, k_lin, qk = qk_norm_forward(params, q_lin, k_lin, cfg)      # (B, T, H*D) ...
    q = split_heads(q_lin, cfg.n_head)                                      # (B, H, T, D)
    k = split_heads(k_lin, cfg.kv_heads)                                    # (B, K, S, D)
    v = split_heads(v_lin, cfg.kv_heads)                                    # (B, K, S, D)
    if cfg.qk_norm == "head":  # Qwen3: over each head's D, one scale shared by the heads
        q, k, qk = qk_norm_forward(params, q, k, cfg)                       # (B, H, T, D) ...
    return q, k, v, projections, qkv_adapters, qk


def _qk_norm_backward(dq: np.ndarray, dk: np.ndarray, ctx: AttentionBlockCtx):
    """dq (B, H, T, D), dk (B, K, S, D) back through QK-norm: (dq, dk, the scales' grads). The
    "proj" form normalised merged heads, so the heads are merged and split around it."""
    if ctx.qk_norm.kind == "head":
        return qk_norm_backward(dq, dk, ctx.qk_norm)
    dq, dk, grads = qk_norm_backward(merge_heads(dq), merge_heads(dk), ctx.qk_norm)
    return split_heads(dq, ctx.n_head), split_heads(dk, ctx.attn.k.shape[1]), grads


def _rotate(q: np.ndarray, k: np.ndarray, positions: np.ndarray, rope_tables, cfg: BlockConfig,
            layer: int):
    """RoPE on q (B, H, T, D) and the new keys k (B, K, T, D), which sit at the same positions:
    (q, k, q_rope, k_rope)."""
    if rope_tables is None:  # a model passes the tables it made once for all its layers
        theta, scaling = cfg.rope_at(layer)      # Gemma 3: a windowed layer's own base
        rope_tables = rope_tables_at(positions, cfg.dim_per_head, theta=theta, scaling=scaling,
                                     dtype=q.dtype)                         # (T, D) or (B, T, D)
    cos, sin = rope_tables
    if cos.ndim == 3:  # per-row positions (B, T, D) -> (B, 1, T, D), broadcast over heads
        cos, sin = cos[:, None], sin[:, None]
    kernels = prefill_kernels()     # its rope_forward: one compiled pass, the same ctx
    rotate = rope_forward if kernels is None else kernels.rope_forward
    q, q_rope = rotate(q, cos, sin)
    k, k_rope = rotate(k, cos, sin)
    return q, k, q_rope, k_rope


def _alibi(cfg: BlockConfig, t: int, s: int, dtype) -> np.ndarray | None:
    """ALiBi's bias (K, G, T, S) for T queries over S keys, or None without ALiBi."""
    if cfg.position != "alibi":
        return None
    bias = alibi_bias(cfg.n_head, t, s, dtype=dtype)                        # (H, T, S)
    return bias.reshape(cfg.kv_heads, cfg.n_head // cfg.kv_heads, t, s)     # (K, G, T, S)


def _sinks(params: dict, cfg: BlockConfig) -> np.ndarray | None:
    """The sink logits (H,) as (K, G, 1, 1), one per query head, or None without sinks."""
    if not cfg.attn_sinks:
        return None
    return params["sinks"].reshape(cfg.kv_heads, cfg.n_head // cfg.kv_heads, 1, 1)


def attention_block_forward(params: dict, x: np.ndarray, cfg: BlockConfig, *,
                            causal: bool, memory: np.ndarray | None = None,
                            key_mask: np.ndarray | None = None,
                            positions: np.ndarray | None = None,
                            rope_tables: tuple[np.ndarray, np.ndarray] | None = None,
                            kv_cache: KVCache | None = None, layer: int = 0,
                            memory_kv: tuple[np.ndarray, np.ndarray] | None = None,
                            frozen: bool = False, train: bool = False,
                            rng: np.random.Generator | None = None, hooks: dict | None = None
                            ) -> tuple[np.ndarray, AttentionBlockCtx]:
    """y = Attention(x W_q, src W_k, src W_v) W_o, with src = memory or x.

    params: wq (C, H*D), wk, wv (C, K*D), wo (H*D, C), and bq, bk, bv, bo when the config has them.
    key_mask: (B, S) bool, True for real (non-padding) keys, S counting cached keys.
    rope_tables: (cos, sin) from rope_tables_at(positions, ...), when the caller already has them.
    positions: (T,) or (B, T) absolute positions of the queries, for RoPE; default
    kv_cache.length + arange(T) (or arange(T)).
    kv_cache: this layer's keys and values so far (generation); the new ones are written into it.
    memory_kv: cross-attention keys and values (B, K, S, D) each, projected once from the encoder
    output by blocks/qkv.py's `cross_kv` (decoding: inference only, like kv_cache); then memory
    is not needed.
    frozen: the base weights take no gradient (a LoRA model). train, rng: LoRA dropout only.
    hooks: functions at blocks.{layer}.attn.hook_q / hook_k / hook_v (before RoPE) and hook_z
    (the heads' outputs), which may replace them (blocks/hooks.py); None: none called.
    """
    _check_inputs(x, memory, cfg)
    b, t = x.shape[:2]
    q, k, v, projections, qkv_adapters, qk_norm = _heads(params, x, memory, memory_kv, cfg,
                                                         frozen=frozen, train=train, rng=rng)
    if hooks is not None:  # (B, H, T, D) inside, (B, T, H, D) to the hook
        prefix = f"blocks.{layer}.attn."
        q, k, v = (run_hook(hooks, prefix + f"hook_{name}", value, to_hook=heads_view,
                            from_hook=heads_view) for name, value in (("q", q), ("k", k), ("v", v)))
    q_rope = k_rope = None
    if cfg.position == "rope":
        if positions is None:
            offset = 0 if kv_cache is None else kv_cache.length
            positions = np.arange(offset, offset + t)
        q, k, q_rope, k_rope = _rotate(q, k, positions, rope_tables, cfg, layer)
    if kv_cache is not None:
        k, v = kv_cache.write(layer, k, v)       # (B, K, S, D): every key and value so far
        # a windowed layer's ring (blocks/kv_cache.py) hands back only its newest S keys
        key_mask = None if key_mask is None else key_mask[:, key_mask.shape[1] - k.shape[2]:]
    cached = kv_cache is not None or memory_kv is not None
    window = cfg.window_at(layer) if causal and memory is None else None
    options = dict(mask=_attention_mask(key_mask), causal=causal,
                   bias=_alibi(cfg, t, k.shape[2], q.dtype), scale=cfg.attn_scale,
                   window=window, softcap=cfg.attn_softcap, sinks=_sinks(params, cfg))
    if t >= TILED_FROM and (cached or train):   # no one reads these weights: O(T) memory
        kernels = prefill_kernels()             # compiled twin (kernels/prefill_numba.py)
        tiled = tiled_attention_forward if kernels is None else kernels.tiled_attention_forward
        out, attn = tiled(_group(q, cfg.kv_heads), k[:, :, None], v[:, :, None],
                          **options)                                          # (B, K, G, T, D)
    else:  # cached (generation): no backward follows, so the (T, S) weights are not kept
        out, attn = attention_forward(_group(q, cfg.kv_heads), k[:, :, None], v[:, :, None],
                                      keep_weights=not cached, **options)      # (B, K, G, T, D)
    out = out.reshape(b, cfg.n_head, t, -1)               # (B, K, G, T, D) -> (B, H, T, D)
    if hooks is not None:
        out = run_hook(hooks, f"blocks.{layer}.attn.hook_z", out, to_hook=heads_view,
                       from_hook=heads_view)
    out = merge_heads(out)                                # (B, H, T, D) -> (B, T, H*D)
    y, out_proj = projection_forward(params, "wo", "bo", out, frozen=frozen, train=train,
                                     rng=rng)                               # (B, T, C)
    ctx = AttentionBlockCtx(*projections, q_rope, k_rope, attn, out_proj, cfg.n_head,
                            cross=memory is not None or memory_kv is not None, cached=cached,
                            qkv_adapters=qkv_adapters, qk_norm=qk_norm)
    return y, ctx


def attention_block_backward(dy: np.ndarray, ctx: AttentionBlockCtx
                             ) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """Returns (grads, dx, dmemory); dmemory is None for self-attention."""
    if ctx.cached:
        raise GlassformerError("a forward run with a KV cache is inference only; "
                               "run the forward without kv_cache to train")
    dout, grads, dbo = projection_backward(dy, ctx.out_proj, "wo")         # (B, T, H*D)
    b, t = dy.shape[:2]
    n_kv = ctx.attn.k.shape[1]
    dout = _group(split_heads(dout, ctx.n_head), n_kv)                      # (B, K, G, T, D)
    backward = (tiled_attention_backward if isinstance(ctx.attn, TiledAttentionCtx)
                else attention_backward)
    dq, dk, dv, *dsinks = backward(dout, ctx.attn)   # dsinks: [(K, G, 1, 1)] or []
    if dsinks:
        grads["sinks"] = dsinks[0].reshape(ctx.n_head)                     # (K, G, 1, 1) -> (H,)
    dq = dq.reshape(b, ctx.n_head, t, -1)                 # (B, K, G, T, D) -> (B, H, T, D)
    dk, dv = dk[:, :, 0], dv[:, :, 0]                     # (B, K, 1, S, D) -> (B, K, S, D)
    if ctx.q_rope is not None:
        dq = rope_backward(dq, ctx.q_rope)
        dk = rope_backward(dk, ctx.k_rope)
    if ctx.qk_norm is not None:
        dq, dk, norm_grads = _qk_norm_backward(dq, dk, ctx)
        grads.update(norm_grads)
    projections = (ctx.qkv_proj, ctx.q_proj, ctx.k_proj, ctx.v_proj)
    proj_grads, dx, dsource = qkv_backward(dq, dk, dv, projections, ctx.qkv_adapters)
    grads.update(proj_grads)
    if dbo is not None:
        grads["bo"] = dbo
    if ctx.cross:
        return grads, dx, dsource
    if dsource is not None:
        dx = dx + dsource  # fan-out: in self-attention x is the query source too
    return grads, dx, None


# ---------------------------------------------------------------- reading a block's ctx
# What views of a forward (viewer/, explain/) read off an attention block, by name, so that they
# do not depend on how the ctx is laid out.

def head_weights(ctx: AttentionBlockCtx) -> np.ndarray:
    """The attention weights per query head, (B, K, G, T, S) viewed as (B, H, T, S) (query head
    h = kv * G + g, as HF's repeat_kv orders them): exactly the float32 weights the forward
    multiplied V by. Not kept by a cached (generation) forward nor a long training one."""
    if isinstance(ctx.attn, TiledAttentionCtx):
        raise GlassformerError("this attention ran by tiles (a long training forward) and kept "
                               "no weights; run the forward with train=False to see them")
    probs = ctx.attn.softmax.probs                                          # (B, K, G, T, S)
    b, k, g, t, s = probs.shape
    return probs.reshape(b, k * g, t, s)


def attention_inputs(ctx: AttentionBlockCtx) -> tuple[np.ndarray, np.ndarray | None]:
    """(x, source): what the queries read (B, T, C) and what the keys and values read (B, S, C):
    x itself in self-attention, memory in cross-attention (None when decoding read memory_kv).
    The projections' ctxs keep them for dW (not in a frozen, LoRA model's forward)."""
    if ctx.qkv_proj is not None:  # the joined product read x once for all three
        return ctx.qkv_proj.x, ctx.qkv_proj.x
    source = None if ctx.k_proj is None else ctx.k_proj.x
    return ctx.q_proj.x, source


def merged_heads(ctx: AttentionBlockCtx) -> np.ndarray:
    """The heads' outputs, merged (B, T, H*D): what the output projection read."""
    return ctx.out_proj.x


def attention_shapes(cfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """Param names and shapes of one attention block, in the order init draws them."""
    c, hd, kd = cfg.d_model, cfg.n_head * cfg.dim_per_head, cfg.kv_heads * cfg.dim_per_head
    shapes = {"wq": (c, hd), "wk": (c, kd), "wv": (c, kd),                # (C, H*D), (C, K*D)
              "wo": (hd, c)}                                              # (H*D, C)
    if cfg.qkv_bias:
        shapes.update(bq=(hd,), bk=(kd,), bv=(kd,))
    if cfg.out_bias:
        shapes["bo"] = (c,)
    shapes.update(qk_norm_shapes(cfg))                                    # q_norm, k_norm
    if cfg.attn_sinks:
        shapes["sinks"] = (cfg.n_head,)                                   # (H,)
    return shapes


def init_attention(cfg: BlockConfig, rng: np.random.Generator, *, std: float, out_std: float,
                   dtype=np.float32) -> dict:
    """Normal(0, std) projections; Normal(0, out_std) for wo, which writes into the residual;
    zero biases, QK-norm scales of 1. Draws wq, wk, wv, wo in that order (attention_shapes'
    order)."""
    params = init_projections(attention_shapes(cfg), rng, std=std, out_std=out_std,
                              out_weight="wo", dtype=dtype)
    for name in ("q_norm", "k_norm"):
        if name in params and cfg.norm_offset:       # Gemma: a gain of 1 is a stored w of 0
            params[name] = params[name] - np.asarray(cfg.norm_offset, dtype)
    if cfg.attn_sinks:
        params["sinks"] = np.zeros(cfg.n_head, dtype)  # no weight parked on the sink at first
    return params
