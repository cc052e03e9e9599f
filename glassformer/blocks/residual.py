"""A Transformer layer: attention and MLP sub-blocks, each wrapped in a residual connection.

    pre-norm  (GPT-2, LLaMA):                post-norm (BERT, original Transformer):
        h   = x + Attn(Norm1(x))                 h   = Norm1(x + Attn(x))
        out = h + MLP(Norm2(h))                  out = Norm2(h + MLP(h))

The residual stream fans out: x feeds both the sub-block and the sum, so its gradient is the
gradient through the sub-block plus the gradient that skips it. Each such sum is one commented
line in `block_backward`. Dropout (training only) is applied to each sub-block's output before
it joins the residual, as GPT-2 and BERT do.

An encoder-decoder layer adds cross-attention over `memory`: pass `memory` and keep the params
under "cross." and the norm under "norm_cross.".
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.attention import (AttentionBlockCtx, attention_block_backward,
                                          attention_block_forward, init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.mlp import MLPCtx, init_mlp, mlp_backward, mlp_forward
from glassformer.blocks.norm import NormCtx, init_norm, norm_backward, norm_forward
from glassformer.generate.kv_cache import KVCache
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.dropout import DropoutCtx, dropout_backward, dropout_forward


class SubCtx(NamedTuple):
    """One residual sub-block: its norm, its body (attention or MLP) and its dropout."""
    norm: NormCtx
    body: AttentionBlockCtx | MLPCtx
    drop: DropoutCtx


class BlockCtx(NamedTuple):
    norm_position: str
    attn: SubCtx
    cross: SubCtx | None
    mlp: SubCtx


def _sub(params: dict, prefix: str) -> dict:
    """The params under `prefix` ("attn.") with the prefix removed."""
    return {key[len(prefix):]: value for key, value in params.items() if key.startswith(prefix)}


def _prefixed(grads: dict, prefix: str) -> dict:
    return {prefix + key: value for key, value in grads.items()}


def _residual_forward(params, x, cfg, norm_prefix, body, train, rng):
    """One sub-block in the config's norm position. body(h) -> (out, ctx)."""
    if cfg.norm_position == "pre":
        h, norm_ctx = norm_forward(params, norm_prefix, x, cfg)
        out, body_ctx = body(h)
        out, drop_ctx = dropout_forward(out, p=cfg.dropout, rng=rng, train=train)
        return x + out, SubCtx(norm_ctx, body_ctx, drop_ctx)
    out, body_ctx = body(x)
    out, drop_ctx = dropout_forward(out, p=cfg.dropout, rng=rng, train=train)
    y, norm_ctx = norm_forward(params, norm_prefix, x + out, cfg)
    return y, SubCtx(norm_ctx, body_ctx, drop_ctx)


def _residual_backward(dy, ctx: SubCtx, norm_position, norm_prefix, body_backward):
    """Backward of `_residual_forward`. body_backward(dout, ctx) -> (grads, dx, extra)."""
    if norm_position == "pre":
        dout = dropout_backward(dy, ctx.drop)
        grads, dh, extra = body_backward(dout, ctx.body)
        dnorm_in, norm_grads = norm_backward(dh, ctx.norm, norm_prefix)
        dx = dy + dnorm_in  # residual fan-out: skip path + path through norm and body
    else:
        dsum, norm_grads = norm_backward(dy, ctx.norm, norm_prefix)
        dout = dropout_backward(dsum, ctx.drop)
        grads, dbody_in, extra = body_backward(dout, ctx.body)
        dx = dsum + dbody_in  # residual fan-out: skip path + path through the body
    return {**grads, **norm_grads}, dx, extra


def block_forward(params: dict, x: np.ndarray, cfg: BlockConfig, *, causal: bool,
                  key_mask: np.ndarray | None = None, positions: np.ndarray | None = None,
                  rope_tables: tuple[np.ndarray, np.ndarray] | None = None,
                  memory: np.ndarray | None = None, memory_mask: np.ndarray | None = None,
                  kv_cache: KVCache | None = None, layer: int = 0, train: bool = False,
                  rng: np.random.Generator | None = None) -> tuple[np.ndarray, BlockCtx]:
    """One layer. x (B, T, C) -> (B, T, C). Params use the block-local names ("attn.wq", ...)."""
    # note: checked here too, since a pre-norm layer would otherwise first meet x in the norm,
    # whose error blames the norm's weight for a wrong C
    check_shape("x", check_float("x", x), ("B", "T", "C"), {"C": cfg.d_model})
    def self_attention(h):
        return attention_block_forward(_sub(params, "attn."), h, cfg, causal=causal,
                                       key_mask=key_mask, positions=positions,
                                       rope_tables=rope_tables,
                                       kv_cache=kv_cache, layer=layer)

    def cross_attention(h):
        return attention_block_forward(_sub(params, "cross."), h, cfg, causal=False,
                                       memory=memory, key_mask=memory_mask)

    def mlp(h):
        return mlp_forward(_sub(params, "mlp."), h, cfg)

    h, attn_ctx = _residual_forward(params, x, cfg, "norm1.", self_attention, train, rng)
    cross_ctx = None
    if memory is not None:
        h, cross_ctx = _residual_forward(params, h, cfg, "norm_cross.", cross_attention,
                                         train, rng)
    out, mlp_ctx = _residual_forward(params, h, cfg, "norm2.", mlp, train, rng)
    return out, BlockCtx(cfg.norm_position, attn_ctx, cross_ctx, mlp_ctx)


def block_backward(dout: np.ndarray, ctx: BlockCtx
                   ) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """Returns (grads with block-local names, dx, dmemory or None)."""
    def mlp_back(dy, body_ctx):
        grads, dx = mlp_backward(dy, body_ctx)
        return _prefixed(grads, "mlp."), dx, None

    def attn_back(prefix):
        def back(dy, body_ctx):
            grads, dx, dmemory = attention_block_backward(dy, body_ctx)
            return _prefixed(grads, prefix), dx, dmemory
        return back

    pos = ctx.norm_position
    grads, dh, _ = _residual_backward(dout, ctx.mlp, pos, "norm2.", mlp_back)
    dmemory = None
    if ctx.cross is not None:
        cross_grads, dh, dmemory = _residual_backward(dh, ctx.cross, pos, "norm_cross.",
                                                      attn_back("cross."))
        grads.update(cross_grads)
    attn_grads, dx, _ = _residual_backward(dh, ctx.attn, pos, "norm1.", attn_back("attn."))
    grads.update(attn_grads)
    return grads, dx, dmemory


def init_block(cfg: BlockConfig, rng: np.random.Generator, *, std: float = 0.02,
               out_std: float = 0.02, cross: bool = False, dtype=np.float32) -> dict:
    """Fresh params for one layer, with block-local names."""
    params = {}
    params.update(init_norm(cfg, "norm1.", dtype))
    params.update(_prefixed(init_attention(cfg, rng, std=std, out_std=out_std, dtype=dtype),
                            "attn."))
    if cross:
        params.update(init_norm(cfg, "norm_cross.", dtype))
        params.update(_prefixed(init_attention(cfg, rng, std=std, out_std=out_std, dtype=dtype),
                                "cross."))
    params.update(init_norm(cfg, "norm2.", dtype))
    params.update(_prefixed(init_mlp(cfg, rng, std=std, out_std=out_std, dtype=dtype), "mlp."))
    return params
