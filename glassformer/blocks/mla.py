"""Multi-head latent attention (MLA; DeepSeek-V2, arXiv 2405.04434, sec. 2.1; used by DeepSeek-V3).

Keys and values come from one small latent per token, not from per-head projections, and a
generation cache keeps only that latent and one shared RoPE key (blocks/kv_cache.py):

    x (B, T, C) --wq_a--> (B, T, Rq) --RMSNorm q_norm--> --wq_b--> q (B, T, H*(Dn+Dr))
                 (or --wq--> q directly when q_lora_rank is None)
    q heads (B, H, T, Dn+Dr) = [ q_nope (Dn) | q_pe (Dr) ]          q_pe gets RoPE
    x --wkv_a--> (B, T, R + Dr) = [ latent (R) | k_pe (Dr) ]          k_pe gets RoPE, once
         latent --RMSNorm kv_norm--> c (B, T, R)     <- what the cache keeps, with k_pe
         c --wkv_b--> (B, S, H*(Dn+Dv)) = per head [ k_nope (Dn) | v (Dv) ]
    k head h = [ k_nope_h | k_pe ]      (k_pe the same for every head: the "decoupled" RoPE key)
    out = attention(q, k, v) (B, H, T, Dv) -> (B, T, H*Dv) --wo--> y (B, T, C)

Why the decoupled part: RoPE turns keys by their position, so a key made from the latent by wkv_b
and then rotated could not be folded into the query's weights; MLA keeps position out of the
latent path and adds a narrow RoPE part (Dr) whose key is one vector shared by all heads.
Scores: q_h . k_h = q_nope_h . k_nope_h + q_pe_h . k_pe, times the softmax scale
1 / sqrt(Dn + Dr), times mscale(factor, mscale_all_dim)^2 under YaRN RoPE (DeepSeek-V3's
temperature, as transformers' yarn_apply_mscale).

Legend beyond ops/__init__.py's: R kv_lora_rank, Rq q_lora_rank, Dn qk_nope_head_dim,
Dr qk_rope_head_dim, Dv v_head_dim. Matches transformers' DeepseekV3Attention (eager): the two
latent norms use eps 1e-6 whatever rms_norm_eps says (DeepseekV3RMSNorm's default, as HF builds
them); `rope_interleave` pairs dims (2i, 2i+1) as DeepSeek's checkpoints (ops/rope.py:
deinterleave). No biases (attention_bias=False), no LoRA adapters. The cached forward rebuilds
every key and value from the latent for a prompt, as transformers does, but decodes one token
at a time in the latent space (`_absorbed_attention`): wkv_b folded into the query and the
output, the cache read as one shared key/value head, no per-head keys made.

Backward: every op's own backward in reverse. Three fan-outs, each on a commented line: the one
RoPE key feeds all H heads (its gradient is the sum over heads), x feeds the query and the latent
paths, and wkv_b's output splits into k_nope and v (their gradients are joined side by side).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.blocks.heads import merge_heads, split_heads
from glassformer.blocks.config import BlockConfig, MLAConfig
from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.blocks.projection import init_projections
from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.attention import AttentionCtx, attention_backward, attention_forward
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.rms_norm import RMSNormCtx, rms_norm_backward, rms_norm_forward
from glassformer.ops.rope import (RopeCtx, deinterleave, interleave, rope_backward, rope_forward,
                                  rope_tables_at)
from glassformer.ops.rope_scaling import yarn_mscale

# transformers builds q_a_layernorm and kv_a_layernorm as DeepseekV3RMSNorm(width), whose eps
# defaults to 1e-6: config.json's rms_norm_eps does not reach them.
LATENT_NORM_EPS = 1e-6


class MLACtx(NamedTuple):
    """Saved by `mla_block_forward`, each op's own ctx.

    q_a, q_norm: the low-rank query path (None when the block has one plain wq: q_b is then wq).
    kv_a: x -> [latent | k_pe]; kv_norm: the latent's RMSNorm; kv_b: c -> [k_nope | v] per head,
    whose ctx keeps c (B, S, R), the normalised latent (the cache's content); None when one
    token was decoded against the cache (_absorbed_attention: no keys and values are made).
    q_rope, k_rope: RoPE on q_pe (B, H, T, Dr) and k_pe (B, 1, T, Dr).
    attn: the attention op's ctx (q, k, v and the weights); out_proj: wo.
    """
    q_a: LinearCtx | None
    q_norm: RMSNormCtx | None
    q_b: LinearCtx
    kv_a: LinearCtx
    kv_norm: RMSNormCtx
    kv_b: LinearCtx | None
    q_rope: RopeCtx
    k_rope: RopeCtx
    attn: AttentionCtx
    out_proj: LinearCtx
    mla: MLAConfig
    cached: bool       # keys came from a latent cache: inference only, no backward


def mla_softmax_scale(cfg: BlockConfig) -> float:
    """1 / sqrt(Dn + Dr), times mscale(factor, mscale_all_dim)^2 under a scaled RoPE that sets
    mscale_all_dim (DeepSeek-V3's YaRN), as transformers' yarn_apply_mscale."""
    mla = cfg.mla
    scale = 1.0 / math.sqrt(mla.qk_nope_head_dim + mla.qk_rope_head_dim)
    scaling = cfg.rope_scaling
    if scaling is not None and scaling.rope_type != "default" and mla.mscale_all_dim:
        mscale = yarn_mscale(scaling.factor, mla.mscale_all_dim)
        scale = scale * mscale * mscale
    return scale


def _queries(params: dict, x: np.ndarray, mla: MLAConfig):
    """q (B, T, H*(Dn+Dr)) and the ctxs (q_a, q_norm, q_b) of its path."""
    if mla.q_lora_rank is None:
        q, q_b = linear_forward(x, params["wq"])                    # (B, T, C) -> (B, T, H*Dq)
        return q, (None, None, q_b)
    q_low, q_a = linear_forward(x, params["wq_a"])                   # (B, T, C) -> (B, T, Rq)
    q_low, q_norm = rms_norm_forward(q_low, params["q_norm.w"], eps=LATENT_NORM_EPS)
    q, q_b = linear_forward(q_low, params["wq_b"])                   # (B, T, Rq) -> (B, T, H*Dq)
    return q, (q_a, q_norm, q_b)


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool):
    """RoPE on x (B, n, T, Dr), de-interleaving DeepSeek's adjacent pairs first when asked."""
    if interleaved:
        x = deinterleave(x)
    return rope_forward(x, cos, sin)


def _tables(positions, rope_tables, cfg: BlockConfig, dtype):
    """(cos, sin), (T, Dr) or (B, 1, T, Dr) for per-row positions, broadcast over heads."""
    if rope_tables is None:  # a model passes the tables it made once for all its layers
        rope_tables = rope_tables_at(positions, cfg.mla.qk_rope_head_dim, theta=cfg.rope_theta,
                                     scaling=cfg.rope_scaling, dtype=dtype)
    cos, sin = rope_tables
    if cos.ndim == 3:  # per-row positions (B, T, Dr) -> (B, 1, T, Dr)
        cos, sin = cos[:, None], sin[:, None]
    return cos, sin


def mla_block_forward(params: dict, x: np.ndarray, cfg: BlockConfig, *, causal: bool = True,
                      key_mask: np.ndarray | None = None, positions: np.ndarray | None = None,
                      rope_tables: tuple[np.ndarray, np.ndarray] | None = None,
                      kv_cache: KVCache | None = None, layer: int = 0
                      ) -> tuple[np.ndarray, MLACtx]:
    """y = MLA(x): x (B, T, C) -> y (B, T, C) (see the module docstring).

    params: wq (C, H*(Dn+Dr)), or wq_a (C, Rq), q_norm.w (Rq,), wq_b (Rq, H*(Dn+Dr)); wkv_a
    (C, R+Dr), kv_norm.w (R,), wkv_b (R, H*(Dn+Dv)), wo (H*Dv, C).
    key_mask (B, S): True for real keys, S counting cached ones. positions (T,) or (B, T): RoPE
    positions (default kv_cache.length + arange(T)). kv_cache: a latent cache (k: c (B, 1, ., R),
    v: k_pe (B, 1, ., Dr)); this step's latent and RoPE key are written into it.
    """
    mla = cfg.mla
    check_shape("x", check_float("x", x), ("B", "T", "C"), {"C": cfg.d_model})
    t = x.shape[1]
    dn, dr = mla.qk_nope_head_dim, mla.qk_rope_head_dim
    q, q_ctxs = _queries(params, x, mla)                             # (B, T, H*(Dn+Dr))
    q = split_heads(q, cfg.n_head)                                   # -> (B, H, T, Dn+Dr)
    kv, kv_a = linear_forward(x, params["wkv_a"])                    # (B, T, C) -> (B, T, R+Dr)
    latent, k_pe = kv[..., :mla.kv_lora_rank], kv[..., mla.kv_lora_rank:]   # (B, T, R), (B, T, Dr)
    c, kv_norm = rms_norm_forward(latent, params["kv_norm.w"], eps=LATENT_NORM_EPS)  # (B, T, R)
    if positions is None:
        offset = 0 if kv_cache is None else kv_cache.length
        positions = np.arange(offset, offset + t)
    cos, sin = _tables(positions, rope_tables, cfg, x.dtype)
    q_pe, q_rope = _rope(q[..., dn:], cos, sin, mla.rope_interleave)             # (B, H, T, Dr)
    k_pe, k_rope = _rope(k_pe[:, None], cos, sin, mla.rope_interleave)           # (B, 1, T, Dr)
    c = c[:, None]                                                   # (B, T, R) -> (B, 1, T, R)
    if kv_cache is not None:
        c, k_pe = kv_cache.write(layer, c, k_pe)      # (B, 1, S, R), (B, 1, S, Dr): all so far
    mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
    options = dict(mask=mask, causal=causal, scale=mla_softmax_scale(cfg))
    cached = kv_cache is not None
    if cached and t == 1:   # one new token against the cache: attend in the latent space
        out, attn = _absorbed_attention(q[..., :dn], q_pe, c, k_pe, params["wkv_b"], cfg,
                                        mask=mask, scale=options["scale"])
        kv_b = None
    else:
        kv_heads, kv_b = linear_forward(c[:, 0], params["wkv_b"])    # (B, S, R) -> (B, S, H*(Dn+Dv))
        kv_heads = split_heads(kv_heads, cfg.n_head)                 # -> (B, H, S, Dn+Dv)
        k = np.empty(kv_heads.shape[:-1] + (dn + dr,), x.dtype)      # (B, H, S, Dn+Dr)
        k[..., :dn] = kv_heads[..., :dn]
        k[..., dn:] = k_pe                           # (B, 1, S, Dr) broadcast over the H heads
        q = np.concatenate([q[..., :dn], q_pe], axis=-1)             # (B, H, T, Dn+Dr)
        out, attn = attention_forward(q, k, kv_heads[..., dn:], keep_weights=not cached,
                                      **options)                     # (B, H, T, Dv)
    y, out_proj = linear_forward(merge_heads(out), params["wo"])     # (B, T, H*Dv) -> (B, T, C)
    ctx = MLACtx(*q_ctxs, kv_a, kv_norm, kv_b, q_rope, k_rope, attn, out_proj, mla, cached)
    return y, ctx


def _absorbed_attention(q_nope: np.ndarray, q_pe: np.ndarray, c: np.ndarray, k_pe: np.ndarray,
                        wkv_b: np.ndarray, cfg: BlockConfig, *, mask: np.ndarray | None,
                        scale: float) -> tuple[np.ndarray, AttentionCtx]:
    """Attention of one new token read straight off the latent cache (decoding, inference only).

    q_nope (B, H, 1, Dn), q_pe (B, H, 1, Dr), c (B, 1, S, R), k_pe (B, 1, S, Dr) -> (B, H, 1, Dv);
    mask (B, 1, 1, S) or None.
    wkv_b's two halves per head, W_k (R, Dn) and W_v (R, Dv), move to the query and the output:

        q_nope . (c W_k) = (q_nope W_k^T) . c        weights @ (c W_v) = (weights @ c) W_v

    so the S cached latents are never expanded to H keys and values: the attention op runs as
    multi-query attention whose one key head is [c | k_pe] (R + Dr) and whose value head is c,
    broadcast over the H query heads. The same scores and output; per step it reads the cache
    once instead of multiplying all S latents by wkv_b ("weight absorption", DeepSeek-V2 sec. 2.1.2).
    """
    mla = cfg.mla
    per_head = wkv_b.reshape(mla.kv_lora_rank, cfg.n_head, -1)      # (R, H*(Dn+Dv)) -> (R, H, Dn+Dv)
    w_k = per_head[..., :mla.qk_nope_head_dim].transpose(1, 2, 0)   # (H, Dn, R)
    w_v = per_head[..., mla.qk_nope_head_dim:].transpose(1, 0, 2)   # (H, R, Dv)
    b, h, t, _ = q_nope.shape                                        # t = 1
    q_latent = q_nope @ w_k                         # (B, H, 1, Dn) @ (H, Dn, R) -> (B, H, 1, R)
    q = np.concatenate([q_latent, q_pe], axis=-1)                   # (B, H, 1, R+Dr)
    # one key head for all: the H queries become H rows of one product, which reads the cache
    # once (a batch of H products would read it H times)
    q = q.reshape(b, 1, h * t, -1)                  # (B, H, 1, R+Dr) -> (B, 1, H, R+Dr)
    k = np.concatenate([c, k_pe], axis=-1)                          # (B, 1, S, R+Dr)
    # note: the one new token sees every cached key, so no causal rule (it would misread the H
    # rows as H positions)
    out_latent, attn = attention_forward(q, k, c, mask=mask, scale=scale,
                                         keep_weights=False)       # (B, 1, H, R)
    out_latent = out_latent.reshape(b, h, t, -1)    # (B, 1, H, R) -> (B, H, 1, R)
    return out_latent @ w_v, attn                   # (B, H, 1, R) @ (H, R, Dv) -> (B, H, 1, Dv)


def mla_block_backward(dy: np.ndarray, ctx: MLACtx) -> tuple[dict, np.ndarray]:
    """Returns (grads under the forward's param names, dx (B, T, C))."""
    if ctx.cached:
        raise GlassformerError("a forward run with a KV cache is inference only; "
                               "run the forward without kv_cache to train")
    mla = ctx.mla
    dn = mla.qk_nope_head_dim
    grads = {}
    dmerged, grads["wo"], _ = linear_backward(dy, ctx.out_proj)     # (B, T, H*Dv)
    n_head = ctx.attn.q.shape[1]
    dq, dk, dv = attention_backward(split_heads(dmerged, n_head), ctx.attn)
    # dq (B, H, T, Dn+Dr), dk (B, H, S, Dn+Dr), dv (B, H, S, Dv)
    dk_pe = dk[..., dn:].sum(axis=1, keepdims=True)  # fan-out: one RoPE key served all H heads
    dk_pe = rope_backward(dk_pe, ctx.k_rope)                         # (B, 1, S, Dr)
    dq_pe = rope_backward(dq[..., dn:], ctx.q_rope)                  # (B, H, T, Dr)
    if mla.rope_interleave:
        dk_pe, dq_pe = interleave(dk_pe), interleave(dq_pe)
    # fan-out: wkv_b's output held k_nope and v side by side; their grads join the same way
    dkv_heads = np.concatenate([dk[..., :dn], dv], axis=-1)         # (B, H, S, Dn+Dv)
    dc, grads["wkv_b"], _ = linear_backward(merge_heads(dkv_heads), ctx.kv_b)   # (B, S, R)
    dlatent, grads["kv_norm.w"] = rms_norm_backward(dc, ctx.kv_norm)
    dkv = np.concatenate([dlatent, dk_pe[:, 0]], axis=-1)           # (B, T, R+Dr)
    dx_kv, grads["wkv_a"], _ = linear_backward(dkv, ctx.kv_a)
    dq = merge_heads(np.concatenate([dq[..., :dn], dq_pe], axis=-1))  # (B, T, H*(Dn+Dr))
    if ctx.q_a is None:
        dx_q, grads["wq"], _ = linear_backward(dq, ctx.q_b)
    else:
        dq_low, grads["wq_b"], _ = linear_backward(dq, ctx.q_b)     # (B, T, Rq)
        dq_low, grads["q_norm.w"] = rms_norm_backward(dq_low, ctx.q_norm)
        dx_q, grads["wq_a"], _ = linear_backward(dq_low, ctx.q_a)
    dx = dx_q + dx_kv  # fan-out: x fed both the query path and the latent path
    return grads, dx


def mla_latent(ctx: MLACtx) -> np.ndarray:
    """c (B, S, R): the normalised latent the keys and values were made from (what a latent
    cache keeps), as wkv_b's ctx kept it."""
    return ctx.kv_b.x


def mla_shapes(cfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """Param names and shapes of one MLA block, in the order init draws them (HF's order)."""
    mla, c, h = cfg.mla, cfg.d_model, cfg.n_head
    q_width = h * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)      # H*(Dn+Dr)
    if mla.q_lora_rank is None:
        shapes = {"wq": (c, q_width)}
    else:
        shapes = {"wq_a": (c, mla.q_lora_rank), "q_norm.w": (mla.q_lora_rank,),
                  "wq_b": (mla.q_lora_rank, q_width)}
    shapes.update({"wkv_a": (c, mla.kv_lora_rank + mla.qk_rope_head_dim),   # (C, R+Dr)
                   "kv_norm.w": (mla.kv_lora_rank,),                         # (R,)
                   "wkv_b": (mla.kv_lora_rank, h * (mla.qk_nope_head_dim + mla.v_head_dim)),
                   "wo": (h * mla.v_head_dim, c)})                           # (H*Dv, C)
    return shapes


def init_mla(cfg: BlockConfig, rng: np.random.Generator, *, std: float, out_std: float,
             dtype=np.float32) -> dict:
    """Normal(0, std) projections, Normal(0, out_std) for wo (it writes into the residual), norm
    scales 1; drawn in mla_shapes' order."""
    return init_projections(mla_shapes(cfg), rng, std=std, out_std=out_std, out_weight="wo",
                            dtype=dtype)


def latent_layout(mla: MLAConfig) -> KVLayout:
    """What the latent cache keeps per token and layer: c (R) in `k` and k_pe (Dr) in `v`, one
    "head" shared by all H query heads."""
    return KVLayout(heads=1, key_dim=mla.kv_lora_rank, value_dim=mla.qk_rope_head_dim)


def latent_cache(cfg: BlockConfig, *, n_layer: int, batch: int, max_len: int,
                 dtype=np.float32) -> KVCache:
    """An empty latent cache for n_layer MLA blocks: per layer c (B, 1, T_max, R) in `k` and
    k_pe (B, 1, T_max, Dr) in `v`, preallocated."""
    return KVCache.allocate(latent_layout(cfg.mla), n_layer=n_layer, batch=batch,
                            max_len=max_len, dtype=dtype)
