"""GPT-2 (Radford et al. 2019) and nanoGPT-style GPTs, composed of the shared ops and blocks.

    ids (B, T) -> tok_emb[ids] + pos_emb[positions] -> dropout      (B, T, C)
               -> L x pre-norm block (LayerNorm, attention, GELU MLP)
               -> norm_f -> x @ lm_head  (or x @ tok_emb^T when tied)   (B, T, V)

Matches HF `GPT2LMHeadModel` (tanh GELU, "gelu_new"; LayerNorm eps 1e-5) when loaded from its
weights. Init follows GPT-2 / nanoGPT: Normal(0, 0.02) everywhere, zero biases, and the two
projections that write into the residual stream (attn.wo, mlp.w_down) scaled by 1/sqrt(2 L),
since L layers each add two of them to the same stream.
Deviation: no dropout on the attention weights (only on embeddings and sub-block outputs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.hooks import run_hook
from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.blocks.lora import adapter_grads, has_adapters
from glassformer.blocks.residual import BlockCtx
from glassformer.models.common import (HeadCtx, check_ids_and_positions, decoder_forward,
                                       head_backward, head_shapes, init_decoder, layers_backward,
                                       layers_shapes, token_embedding_grads)
from glassformer.models.family import (CAUSAL, Family, FamilyConfig, check_config_values,
                                       check_sizes)
from glassformer.ops.dropout import DropoutCtx, dropout_backward, dropout_forward
from glassformer.ops.embedding import EmbeddingCtx, embedding_backward, embedding_forward


@dataclass(frozen=True)
class GPT2Config(FamilyConfig):
    ARCH: ClassVar[str] = "gpt2"
    vocab_size: int = 65            # V (65: the characters of Tiny Shakespeare)
    max_seq_len: int = 64           # T_max, the context ("block size")
    n_layer: int = 4                # L
    n_head: int = 4                 # H
    d_model: int = 128              # C
    d_ff: int | None = None         # F (None: 4 C)
    dropout: float = 0.0            # on embeddings and sub-block outputs, training only
    bias: bool = True               # biases in linear layers and LayerNorms
    tie_embeddings: bool = True     # lm_head is tok_emb^T (GPT-2 does this)
    norm_eps: float = 1e-5          # LayerNorm eps
    activation: str = "gelu_tanh"   # GPT-2's "gelu_new"; "gelu" for exact erf

    def __post_init__(self):
        check_config_values(self)  # types first: no inf, no 2.0 layers, no True heads
        check_sizes(self)
        self.block_config()  # validates n_head vs d_model, dropout range, activation

    def block_config(self) -> BlockConfig:
        return BlockConfig(d_model=self.d_model, n_head=self.n_head, d_ff=self.d_ff,
                           norm="layer", norm_eps=self.norm_eps, norm_bias=self.bias,
                           norm_position="pre", mlp=self.activation, qkv_bias=self.bias,
                           out_bias=self.bias, mlp_bias=self.bias, position="none",
                           dropout=self.dropout)


def kv_layout(cfg: GPT2Config) -> KVLayout:
    """This model's KV cache: every head keeps its own keys and values, D wide each."""
    head_dim = cfg.d_model // cfg.n_head
    return KVLayout(heads=cfg.n_head, key_dim=head_dim, value_dim=head_dim)


class GPT2Ctx(NamedTuple):
    tok: EmbeddingCtx
    pos: EmbeddingCtx
    drop: DropoutCtx
    blocks: list[BlockCtx] | None   # None after a cached (generation) forward
    head: HeadCtx
    frozen: bool = False            # a LoRA model: only the adapters take gradients


def param_shapes(cfg: GPT2Config) -> dict[str, tuple[int, ...]]:
    """The name and shape of every param, in init_params' order."""
    bcfg = cfg.block_config()
    shapes = {"tok_emb": (cfg.vocab_size, cfg.d_model),                       # (V, C)
              "pos_emb": (cfg.max_seq_len, cfg.d_model)}                      # (T_max, C)
    shapes.update(layers_shapes(bcfg, cfg.n_layer))
    shapes.update(head_shapes(cfg, bcfg))
    return shapes


def init_params(cfg: GPT2Config, rng: np.random.Generator) -> dict:
    """Fresh float32 params with GPT-2's init (see module docstring), param_shapes' names."""
    std = 0.02
    shapes = param_shapes(cfg)
    params = {}
    for name in ("tok_emb", "pos_emb"):                                      # drawn in this order
        params[name] = (rng.standard_normal(shapes[name]) * std).astype(np.float32)
    params.update(init_decoder(cfg, rng, std=std))      # then the layers and the head
    return params


def forward(params: dict, ids: np.ndarray, cfg: GPT2Config, *, train: bool = False,
            rng: np.random.Generator | None = None, key_mask: np.ndarray | None = None,
            positions: np.ndarray | None = None, kv_cache: KVCache | None = None,
            last_only: bool = False, head_rows: tuple[np.ndarray, np.ndarray] | None = None,
            on_layer=None, hooks: dict | None = None) -> tuple[np.ndarray, GPT2Ctx]:
    """ids (B, T) -> logits (B, T, V), or (B, 1, V) for the last position only with last_only
    (generation reads no other: the LM head then skips T - 1 rows).

    key_mask (B, S): True for real tokens (left padding is False). positions: (T,) or (B, T)
    absolute positions (default: kv_cache.length + arange(T)).
    head_rows: the N positions (np.nonzero's (rows, columns)) a loss reads; the logits are then
    (N, V), those rows of the full logits (models/common.py: decoder_forward).
    hooks: functions at hook_embed, hook_pos_embed and every layer's points, which may replace
    those values (blocks/hooks.py; glassformer/interpret/ uses them); None: none.
    """
    offset = 0 if kv_cache is None else kv_cache.length
    positions = check_ids_and_positions(ids, positions, offset, cfg.max_seq_len)
    bcfg = cfg.block_config()
    tok, tok_ctx = embedding_forward(ids, params["tok_emb"])          # (B, T) -> (B, T, C)
    pos, pos_ctx = embedding_forward(positions, params["pos_emb"])    # (T,) -> (T, C)
    if hooks is not None:
        tok = run_hook(hooks, "hook_embed", tok)
        pos = run_hook(hooks, "hook_pos_embed", pos)
    x, drop_ctx = dropout_forward(tok + pos, p=cfg.dropout, rng=rng, train=train)
    frozen = has_adapters(params)
    logits, block_ctxs, head_ctx = decoder_forward(
        params, x, bcfg, cfg.n_layer, frozen=frozen, last_only=last_only, head_rows=head_rows,
        key_mask=key_mask, positions=positions, kv_cache=kv_cache, train=train, rng=rng,
        on_layer=on_layer, hooks=hooks)                                 # (B, T, C) -> (B, T, V)
    return logits, GPT2Ctx(tok_ctx, pos_ctx, drop_ctx, block_ctxs, head_ctx, frozen)


def backward(dlogits: np.ndarray, ctx: GPT2Ctx) -> dict:
    """dlogits (B, T, V) -> grads for every param, same keys as `params` (a LoRA model: for its
    adapters only)."""
    head_grads, dx = head_backward(dlogits, ctx.head)
    grads, dx = layers_backward(dx, ctx.blocks)
    if ctx.frozen:
        return adapter_grads(grads)  # nothing below the layers trains: the embeddings are skipped
    dx = dropout_backward(dx, ctx.drop)
    # One position row served every batch item when positions are (T,): sum over B first.
    dx_pos = dx.sum(axis=0) if ctx.pos.ids.ndim == 1 else dx       # (B, T, C) -> (T, C)
    grads["pos_emb"] = embedding_backward(dx_pos, ctx.pos)
    grads.update(token_embedding_grads(dx, ctx.tok, head_grads))  # tok_emb, and the head's
    return grads


# Learned positions: past the context, generation slides a window (see generate/generate.py).
FAMILY = Family(name="gpt2", kind=CAUSAL, config=GPT2Config,
                init_params=init_params, forward=forward, backward=backward,
                param_shapes=param_shapes, kv_layout=kv_layout,
                sliding_context=True)
