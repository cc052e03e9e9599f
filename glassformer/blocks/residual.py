"""A Transformer layer: attention and MLP sub-blocks, each wrapped in a residual connection.
The attention sub-block is blocks/attention.py's, or DeepSeek's latent attention (blocks/mla.py)
when the config has `mla`.

    pre-norm  (GPT-2, LLaMA):                post-norm (BERT, original Transformer):
        h   = x + Attn(Norm1(x))                 h   = Norm1(x + Attn(x))
        out = h + MLP(Norm2(h))                  out = Norm2(h + MLP(h))

    pre_post (Gemma 3: four norms a layer, "norm1_post." and "norm2_post." the second two):
        h   = x + Norm1_post(Attn(Norm1(x)))
        out = h + Norm2_post(MLP(Norm2(h)))

The residual stream fans out: x feeds both the sub-block and the sum, so its gradient is the
gradient through the sub-block plus the gradient that skips it: one commented line in
`_residual_in_backward`. Dropout (training only) is applied to each sub-block's output before
it joins the residual, as GPT-2 and BERT do.

An encoder-decoder layer adds cross-attention over `memory`: pass `memory` and keep the params
under "cross." and the norm under "norm_cross.". Each sub-block reads its params as a sub-dict
with local names (blocks/names.py); `block_backward` puts the grads back under the layer's names.
With `cfg.moe` set, the MLP sub-block of each sparse layer (`cfg.moe.sparse_at(layer)`) is the
mixture-of-experts block of blocks/moe.py; its params stay under "mlp.".
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.attention import (AttentionBlockCtx, attention_block_backward,
                                          attention_block_forward, attention_shapes,
                                          head_weights, init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.hooks import run_hook
from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.mla import (MLACtx, init_mla, mla_block_backward, mla_block_forward,
                                    mla_shapes)
from glassformer.blocks.mlp import MLPCtx, init_mlp, mlp_backward, mlp_forward, mlp_shapes
from glassformer.blocks.moe import (MoECtx, init_moe, moe_backward, moe_forward, moe_output,
                                    moe_shapes)
from glassformer.blocks.names import prefixed, sub_params
from glassformer.blocks.norm import NormCtx, init_norm, norm_backward, norm_forward, norm_shapes
from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.dropout import DropoutCtx, dropout_backward, dropout_forward
from glassformer.ops.linear import linear_forward


class SubCtx(NamedTuple):
    """One residual sub-block: its norm, its body (attention or MLP) and its dropout."""
    norm: NormCtx      # before the body (pre-norm) or after the residual sum (post-norm)
    body: AttentionBlockCtx | MLACtx | MLPCtx | MoECtx
    drop: DropoutCtx
    post: NormCtx | None = None   # a pre_post layer's norm of the body's output


class BlockCtx(NamedTuple):
    norm_position: str
    attn: SubCtx
    cross: SubCtx | None
    mlp: SubCtx


# ---------------------------------------------------------------- one residual sub-block
# A sub-block is three steps: `_residual_in` (the body's input), the body itself (attention or
# MLP, called by block_forward), and `_residual_out` (dropout, the residual sum, post-norm).

def _residual_in(norm_params: dict, x: np.ndarray, cfg: BlockConfig
                 ) -> tuple[np.ndarray, NormCtx | None]:
    """The body's input (B, T, C): Norm(x) in a pre-norm layer, x itself in a post-norm one."""
    if cfg.norm_position == "post":
        return x, None
    return norm_forward(norm_params, x, cfg)


def _residual_out(norm_params: dict, x: np.ndarray, body_out: np.ndarray, in_ctx: SubCtx,
                  cfg: BlockConfig, train: bool, rng, post_params: dict | None = None
                  ) -> tuple[np.ndarray, SubCtx]:
    """Dropout on the body's output, then x + out (pre-norm), x + Norm_post(out) (pre_post) or
    Norm(x + out) (post-norm).

    in_ctx: the SubCtx so far, with the pre-norm's ctx (or None) and the body's ctx.
    post_params: a pre_post layer's second norm of this sub-block.
    """
    out, drop_ctx = dropout_forward(body_out, p=cfg.dropout, rng=rng, train=train)
    if cfg.norm_position == "pre":
        return x + out, in_ctx._replace(drop=drop_ctx)
    if cfg.norm_position == "pre_post":
        out, post_ctx = norm_forward(post_params, out, cfg)                  # (B, T, C)
        return x + out, in_ctx._replace(drop=drop_ctx, post=post_ctx)
    y, norm_ctx = norm_forward(norm_params, x + out, cfg)
    return y, in_ctx._replace(norm=norm_ctx, drop=drop_ctx)


def _residual_out_backward(dy: np.ndarray, ctx: SubCtx, norm_position: str
                           ) -> tuple[dict, np.ndarray, np.ndarray]:
    """Back through `_residual_out`: returns (post-norm grads or {}, d body output, d skip),
    where d skip is the gradient of the residual sum, which reaches x directly too (a pre_post
    layer: its post norm's grads in place of the post-norm's)."""
    if norm_position == "pre":
        return {}, dropout_backward(dy, ctx.drop), dy
    if norm_position == "pre_post":
        post_grads, dout = norm_backward(dy, ctx.post)
        return post_grads, dropout_backward(dout, ctx.drop), dy
    norm_grads, dsum = norm_backward(dy, ctx.norm)
    return norm_grads, dropout_backward(dsum, ctx.drop), dsum


def _residual_in_backward(dbody_in: np.ndarray, dskip: np.ndarray, ctx: SubCtx,
                          norm_position: str) -> tuple[dict, np.ndarray]:
    """Back through `_residual_in`, adding the skip path: returns (pre-norm grads or {}, dx)."""
    if norm_position == "post":
        return {}, dskip + dbody_in  # residual fan-out: skip path + path through the body
    norm_grads, dnorm_in = norm_backward(dbody_in, ctx.norm)
    return norm_grads, dskip + dnorm_in  # residual fan-out: skip path + path through norm and body


# ---------------------------------------------------------------- the layer

def sparse_layer(cfg: BlockConfig, layer: int) -> bool:
    """Whether layer `layer` has the mixture-of-experts MLP (blocks/moe.py)."""
    return cfg.moe is not None and cfg.moe.sparse_at(layer)


def _mlp_forward(params: dict, x: np.ndarray, cfg: BlockConfig, layer: int, *,
                 inference: bool, frozen: bool, train: bool, rng):
    """The MLP sub-block's body: dense (blocks/mlp.py) or, in a sparse layer, mixture of experts."""
    if not sparse_layer(cfg, layer):
        return mlp_forward(params, x, cfg, inference=inference, frozen=frozen, train=train,
                           rng=rng)
    if frozen:
        raise GlassformerError("LoRA adapters on a mixture-of-experts model are not supported")
    return moe_forward(params, x, cfg, inference=inference)


def block_forward(params: dict, x: np.ndarray, cfg: BlockConfig, *, causal: bool,
                  key_mask: np.ndarray | None = None, positions: np.ndarray | None = None,
                  rope_tables: tuple[np.ndarray, np.ndarray] | None = None,
                  memory: np.ndarray | None = None, memory_mask: np.ndarray | None = None,
                  kv_cache: KVCache | None = None, layer: int = 0, train: bool = False,
                  rng: np.random.Generator | None = None,
                  memory_kv: tuple[np.ndarray, np.ndarray] | None = None,
                  frozen: bool = False, hooks: dict | None = None
                  ) -> tuple[np.ndarray, BlockCtx]:
    """One layer. x (B, T, C) -> (B, T, C). Params use the block-local names ("attn.wq", ...).

    memory_kv: this layer's cross-attention k, v from blocks/qkv.py's `cross_kv`, in place
    of memory when decoding (inference only).
    frozen: the attention and MLP weights take no gradient (a LoRA model: blocks/lora.py); their
    adapters, if any, do. rng also draws the adapters' dropout.
    hooks: functions at blocks.{layer}.hook_attn_out, hook_resid_mid, hook_mlp_out and inside
    attention (blocks/hooks.py), which may replace those values; None (the default): none."""
    # note: checked here too, since a pre-norm layer would otherwise first meet x in the norm,
    # whose error blames the norm's weight for a wrong C
    check_shape("x", check_float("x", x), ("B", "T", "C"), {"C": cfg.d_model})
    # self-attention sub-block
    norm1 = sub_params(params, "norm1.")
    a, norm_ctx = _residual_in(norm1, x, cfg)                                 # (B, T, C)
    if cfg.mla is not None:  # DeepSeek's latent attention (no LoRA adapters)
        a, body_ctx = mla_block_forward(sub_params(params, "attn."), a, cfg, causal=causal,
                                        key_mask=key_mask, positions=positions,
                                        rope_tables=rope_tables, kv_cache=kv_cache, layer=layer)
    else:
        a, body_ctx = attention_block_forward(sub_params(params, "attn."), a, cfg,
                                              causal=causal, key_mask=key_mask,
                                              positions=positions, rope_tables=rope_tables,
                                              kv_cache=kv_cache, layer=layer, frozen=frozen,
                                              train=train, rng=rng, hooks=hooks)
    a = run_hook(hooks, f"blocks.{layer}.hook_attn_out", a) if hooks is not None else a
    h, attn_ctx = _residual_out(norm1, x, a, SubCtx(norm_ctx, body_ctx, None), cfg, train, rng,
                                sub_params(params, "norm1_post."))
    # cross-attention sub-block (encoder-decoder layers only): keys and values from memory
    cross_ctx = None
    if memory is not None or memory_kv is not None:
        norm_cross = sub_params(params, "norm_cross.")
        c, norm_ctx = _residual_in(norm_cross, h, cfg)
        c, body_ctx = attention_block_forward(sub_params(params, "cross."), c, cfg, causal=False,
                                              memory=memory, key_mask=memory_mask,
                                              memory_kv=memory_kv, frozen=frozen, train=train,
                                              rng=rng)
        h, cross_ctx = _residual_out(norm_cross, h, c, SubCtx(norm_ctx, body_ctx, None), cfg,
                                     train, rng)
    if hooks is not None:
        h = run_hook(hooks, f"blocks.{layer}.hook_resid_mid", h)
    # MLP sub-block
    norm2 = sub_params(params, "norm2.")
    m, norm_ctx = _residual_in(norm2, h, cfg)
    # a forward with a KV cache is generation: no backward follows (attention refuses one too)
    m, body_ctx = _mlp_forward(sub_params(params, "mlp."), m, cfg, layer,
                               inference=kv_cache is not None, frozen=frozen, train=train,
                               rng=rng)
    m = run_hook(hooks, f"blocks.{layer}.hook_mlp_out", m) if hooks is not None else m
    out, mlp_ctx = _residual_out(norm2, h, m, SubCtx(norm_ctx, body_ctx, None), cfg, train, rng,
                                 sub_params(params, "norm2_post."))
    return out, BlockCtx(cfg.norm_position, attn_ctx, cross_ctx, mlp_ctx)


def block_backward(dout: np.ndarray, ctx: BlockCtx, *, drouter_logits: np.ndarray | None = None
                   ) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """Returns (grads with block-local names, dx, dmemory or None): the forward's steps in
    reverse, MLP, then cross-attention, then self-attention.

    drouter_logits (N, E): in a sparse layer, a loss's gradient on its router logits (the
    balance losses), passed to moe_backward."""
    pos = ctx.norm_position
    grads, dh = mlp_sub_block_backward(dout, ctx, drouter_logits=drouter_logits)  # (B, T, C)
    # cross-attention sub-block
    dmemory = None
    if ctx.cross is not None:
        out_norm, dbody, dskip = _residual_out_backward(dh, ctx.cross, pos)
        cross_grads, dbody_in, dmemory = attention_block_backward(dbody, ctx.cross.body)
        in_norm, dh = _residual_in_backward(dbody_in, dskip, ctx.cross, pos)
        grads.update(prefixed(cross_grads, "cross."))
        grads.update(prefixed({**out_norm, **in_norm}, "norm_cross."))
    # self-attention sub-block
    out_norm, dbody, dskip = _residual_out_backward(dh, ctx.attn, pos)
    if isinstance(ctx.attn.body, MLACtx):
        attn_grads, dbody_in = mla_block_backward(dbody, ctx.attn.body)
    else:
        attn_grads, dbody_in, _ = attention_block_backward(dbody, ctx.attn.body)
    in_norm, dx = _residual_in_backward(dbody_in, dskip, ctx.attn, pos)
    grads.update(prefixed(attn_grads, "attn."))
    grads.update(_norm_grads(out_norm, in_norm, "norm1", pos))
    return grads, dx, dmemory


def _norm_grads(out_norm: dict, in_norm: dict, name: str, norm_position: str) -> dict:
    """A sub-block's norm grads under the layer's names: one norm `name` (pre- or post-norm), or
    a pre_post's two, `name` before the body and `name`_post after it."""
    if norm_position == "pre_post":
        return {**prefixed(in_norm, f"{name}."), **prefixed(out_norm, f"{name}_post.")}
    return prefixed({**out_norm, **in_norm}, f"{name}.")


def mlp_sub_block_backward(dout: np.ndarray, ctx: BlockCtx, *,
                           drouter_logits: np.ndarray | None = None) -> tuple[dict, np.ndarray]:
    """Back through the layer's MLP sub-block only: (its grads with block-local names, dh), dh
    (B, T, C) the gradient of the stream between attention and MLP (interpretability reads it:
    glassformer/interpret/attribution.py)."""
    pos = ctx.norm_position
    out_norm, dbody, dskip = _residual_out_backward(dout, ctx.mlp, pos)
    if isinstance(ctx.mlp.body, MoECtx):
        mlp_grads, dbody_in = moe_backward(dbody, ctx.mlp.body, drouter_logits=drouter_logits)
    else:
        mlp_grads, dbody_in = mlp_backward(dbody, ctx.mlp.body)
    in_norm, dh = _residual_in_backward(dbody_in, dskip, ctx.mlp, pos)            # (B, T, C)
    return {**prefixed(mlp_grads, "mlp."), **_norm_grads(out_norm, in_norm, "norm2", pos)}, dh


# ---------------------------------------------------------------- reading a layer's ctx
# What views of a forward (viewer/, explain/) read off a layer: its attention weights and its
# residual stream, through these names rather than the ctx's inner layout.

def attention_block_ctx(ctx: BlockCtx, *, cross: bool = False) -> AttentionBlockCtx:
    """The ctx of the layer's self-attention block (or, with cross, its cross-attention's)."""
    return (ctx.cross if cross else ctx.attn).body


def moe_block_ctx(ctx: BlockCtx) -> MoECtx | None:
    """The ctx of the layer's mixture-of-experts MLP (blocks/moe.py: router_logits,
    chosen_experts, expert_load...), or None for a dense layer."""
    body = ctx.mlp.body
    return body if isinstance(body, MoECtx) else None


def attention_weights(ctx: BlockCtx, *, cross: bool = False) -> np.ndarray:
    """The layer's self-attention (or cross-attention) weights, (B, H, T, S): a view of the
    float32 weights the forward used (blocks/attention.py: head_weights; an MLA layer's are
    (B, H, T, S) as they are)."""
    body = attention_block_ctx(ctx, cross=cross)
    if isinstance(body, MLACtx):
        return body.attn.softmax.probs                                      # (B, H, T, S)
    return head_weights(body)


def layer_input(ctx: BlockCtx) -> np.ndarray | None:
    """The residual stream entering a post-norm layer, (B, T, C): the layer feeds it straight to
    the q (or joined q|k|v) projection, whose ctx keeps it. None for a pre-norm layer, whose norm
    keeps x-hat but not x (rebuild the stream with `residual_after` instead)."""
    if ctx.norm_position != "post":
        return None
    body = ctx.attn.body
    proj = body.qkv_proj if body.qkv_proj is not None else body.q_proj
    return proj.x


def sub_block_outputs(ctx: BlockCtx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    """(a, m), each (B, T, C): what the attention and the MLP sub-blocks added to the residual
    stream in eval mode (no dropout), recomputed with linear_forward from the input and weight
    their output projections saved, plus the biases in params (block-local names "attn.bo",
    "mlp.b_down"; a LinearCtx keeps no bias). The same product, so the same numbers. A pre_post
    (Gemma) layer adds its post norms' outputs, xhat * gain as their RMSNorm ctxs keep them."""
    out_proj = ctx.attn.body.out_proj
    a, _ = linear_forward(out_proj.x, out_proj.w, params.get("attn.bo"))   # (B, T, H*D) -> C
    if isinstance(ctx.mlp.body, MoECtx):
        m = moe_output(ctx.mlp.body)         # the weighted combine, from the saved expert outputs
    else:
        down = ctx.mlp.body.down
        m, _ = linear_forward(down.x, down.w, params.get("mlp.b_down"))    # (B, T, F) -> C
    if ctx.attn.post is not None:            # pre_post: what joined the stream was normalised
        a = ctx.attn.post.inner.xhat * ctx.attn.post.inner.w
        m = ctx.mlp.post.inner.xhat * ctx.mlp.post.inner.w
    return a, m


def residual_after(ctx: BlockCtx, x: np.ndarray, params: dict) -> np.ndarray:
    """The residual stream leaving a pre-norm layer, (B, T, C), from the stream x entering it:
    the same two sums, in the same order, as block_forward (neither is kept in the ctx)."""
    a, m = sub_block_outputs(ctx, params)
    h = x + a
    return h + m


def block_shapes(cfg: BlockConfig, *, cross: bool = False, layer: int = 0
                 ) -> dict[str, tuple[int, ...]]:
    """Param names (block-local) and shapes of layer `layer`, in the order init_block makes them
    (the layer decides, with cfg.moe, whether its MLP is dense or sparse)."""
    attn_shapes = attention_shapes(cfg) if cfg.mla is None else mla_shapes(cfg)
    shapes = {**prefixed(norm_shapes(cfg), "norm1."), **prefixed(attn_shapes, "attn.")}
    if cross:
        shapes.update(prefixed(norm_shapes(cfg), "norm_cross."))
        shapes.update(prefixed(attention_shapes(cfg), "cross."))
    shapes.update(prefixed(norm_shapes(cfg), "norm2."))
    mlp = moe_shapes(cfg) if sparse_layer(cfg, layer) else mlp_shapes(cfg)
    shapes.update(prefixed(mlp, "mlp."))
    if cfg.norm_position == "pre_post":
        shapes.update(prefixed(norm_shapes(cfg), "norm1_post."))
        shapes.update(prefixed(norm_shapes(cfg), "norm2_post."))
    return shapes


def init_block(cfg: BlockConfig, rng: np.random.Generator, *, std: float = 0.02,
               out_std: float = 0.02, cross: bool = False, dtype=np.float32,
               layer: int = 0) -> dict:
    """Fresh params for layer `layer`, with block-local names, in block_shapes' order: the
    sub-blocks draw in that order (attention, cross-attention, MLP or mixture of experts)."""
    params = {}
    params.update(prefixed(init_norm(cfg, dtype), "norm1."))
    init_attn = init_attention if cfg.mla is None else init_mla
    params.update(prefixed(init_attn(cfg, rng, std=std, out_std=out_std, dtype=dtype), "attn."))
    if cross:
        params.update(prefixed(init_norm(cfg, dtype), "norm_cross."))
        params.update(prefixed(init_attention(cfg, rng, std=std, out_std=out_std, dtype=dtype),
                               "cross."))
    params.update(prefixed(init_norm(cfg, dtype), "norm2."))
    init = init_moe if sparse_layer(cfg, layer) else init_mlp
    params.update(prefixed(init(cfg, rng, std=std, out_std=out_std, dtype=dtype), "mlp."))
    if cfg.norm_position == "pre_post":
        params.update(prefixed(init_norm(cfg, dtype), "norm1_post."))
        params.update(prefixed(init_norm(cfg, dtype), "norm2_post."))
    return params
