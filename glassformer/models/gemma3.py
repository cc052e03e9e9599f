"""Gemma 3 text (Gemma Team 2025): the LLaMA decoder with local and global layers.

    ids (B, T) -> tok_emb[ids] * sqrt(C)                                      (B, T, C)
               -> L x layer:  h   = x + Norm1_post(Attn(Norm1(x)))     four RMSNorms a layer,
                              out = h + Norm2_post(GeGLU(Norm2(h)))    each scaling by (1 + w)
               -> norm_f -> x @ tok_emb^T -> [cap * tanh(logits / cap)]           (B, T, V)

Local and global layers: five of every six layers (by `full_layers`, from config.json's
layer_types) attend through a sliding window of W = sliding_window keys, with RoPE base
`local_rope_theta` (rope_local_base_freq, 10 000) and no scaling; the sixth attends to every key,
with base rope_theta (1 000 000) and the model's RoPE scaling. Each layer's q and k heads are
RMS-normalised (QK-norm, (1 + w) too) before RoPE, and scores are scaled by
query_pre_attn_scalar^-1/2 instead of 1/sqrt(D). Optional soft caps on the scores
(attn_softcap) and on the final logits (final_softcap) are ops/softcap.py's.

    layer:  0  1  2  3  4  5  6  7  8  9 10 11
    kind:   L  L  L  L  L  G  L  L  L  L  L  G       L: window W, base 1e4; G: full, base 1e6

The blocks are the shared ones, switched by BlockConfig flags (pre_post norms, norm_offset,
geglu_tanh, window, local_rope_theta, attn_scale, attn_softcap); this file adds only what sits
outside the layers: the embedding's sqrt(C) and the final soft cap, forward and backward.
Matches HF `Gemma3ForCausalLM` (transformers 5.24) when loaded from its weights. Init: LLaMA's
(norm weights 0, so every gain starts at 1 + 0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.lora import adapter_grads, has_adapters
from glassformer.blocks.residual import BlockCtx
from glassformer.models import llama
from glassformer.models.common import (HeadCtx, check_ids_and_positions, decoder_forward,
                                       head_backward, layers_backward, token_embedding_grads)
from glassformer.models.family import CAUSAL, Family
from glassformer.ops.embedding import EmbeddingCtx, embedding_forward
from glassformer.ops.softcap import SoftcapCtx, softcap_backward, softcap_forward


@dataclass(frozen=True)
class Gemma3Config(llama.LlamaConfig):
    """LlamaConfig's fields (sliding_window and full_layers pick the local layers) and Gemma's."""
    ARCH: ClassVar[str] = "gemma3"
    query_pre_attn_scalar: float = 256.0    # scores scaled by this^-1/2
    local_rope_theta: float = 10000.0       # RoPE base of the windowed (local) layers
    attn_softcap: float | None = None       # cap * tanh(scores / cap) (None: no cap)
    final_softcap: float | None = None      # cap * tanh(logits / cap) (None: no cap)
    tie_embeddings: bool = True             # Gemma ties its head to the embedding

    def block_config(self) -> BlockConfig:
        return replace(super().block_config(), norm_position="pre_post", norm_offset=1.0,
                       mlp="geglu_tanh", qk_norm="head", local_rope_theta=self.local_rope_theta,
                       attn_scale=self.query_pre_attn_scalar ** -0.5,
                       attn_softcap=self.attn_softcap)


class Gemma3Ctx(NamedTuple):
    tok: EmbeddingCtx                # the lookup's
    embed_scale: float               # sqrt(C), multiplied into the looked-up rows
    blocks: list[BlockCtx] | None    # None after a cached (generation) forward
    head: HeadCtx                    # the final norm and the tied head
    final_cap: SoftcapCtx | None     # the final soft cap's, when the config has one
    frozen: bool = False


def embed_scale(cfg: Gemma3Config, dtype) -> float:
    """sqrt(C) rounded to the weights' dtype, as HF's Gemma3TextScaledWordEmbedding keeps it."""
    return float(np.asarray(math.sqrt(cfg.d_model), dtype))


def forward(params: dict, ids: np.ndarray, cfg: Gemma3Config, *, train: bool = False,
            rng: np.random.Generator | None = None, key_mask: np.ndarray | None = None,
            positions: np.ndarray | None = None, kv_cache: KVCache | None = None,
            last_only: bool = False, head_rows: tuple[np.ndarray, np.ndarray] | None = None,
            on_layer=None) -> tuple[np.ndarray, Gemma3Ctx]:
    """ids (B, T) -> logits (B, T, V) (options as llama.forward's)."""
    offset = 0 if kv_cache is None else kv_cache.length
    positions = check_ids_and_positions(ids, positions, offset, cfg.max_seq_len)
    frozen = has_adapters(params)
    x, tok_ctx = embedding_forward(ids, params["tok_emb"])            # (B, T) -> (B, T, C)
    scale = embed_scale(cfg, x.dtype)
    x = x * scale                                                     # Gemma: rows * sqrt(C)
    logits, block_ctxs, head_ctx = decoder_forward(
        params, x, cfg.block_config(), cfg.n_layer, frozen=frozen, last_only=last_only,
        head_rows=head_rows, key_mask=key_mask, positions=positions, kv_cache=kv_cache,
        train=train, rng=rng, on_layer=on_layer)                      # (B, T, C) -> (B, T, V)
    cap_ctx = None
    if cfg.final_softcap is not None:
        logits, cap_ctx = softcap_forward(logits, cfg.final_softcap)  # (B, T, V), in (-cap, cap)
    return logits, Gemma3Ctx(tok_ctx, scale, block_ctxs, head_ctx, cap_ctx, frozen)


def backward(dlogits: np.ndarray, ctx: Gemma3Ctx, *,
             drouter_logits: dict[int, np.ndarray] | None = None) -> dict:
    """dlogits (B, T, V) -> grads for every param (a LoRA model: its adapters only)."""
    if ctx.final_cap is not None:
        dlogits = softcap_backward(dlogits, ctx.final_cap)
    head_grads, dx = head_backward(dlogits, ctx.head)
    grads, dx = layers_backward(dx, ctx.blocks, drouter_logits)
    if ctx.frozen:
        return adapter_grads(grads)
    dx = dx * ctx.embed_scale                                         # back through * sqrt(C)
    grads.update(token_embedding_grads(dx, ctx.tok, head_grads))
    return grads


def init_params(cfg: Gemma3Config, rng: np.random.Generator) -> dict:
    """LLaMA's init under Gemma's block flags: its (1 + w) norms start at w = 0."""
    return llama.init_params(cfg, rng)


FAMILY = Family(name="gemma3", kind=CAUSAL, config=Gemma3Config, init_params=init_params,
                forward=forward, backward=backward, param_shapes=llama.param_shapes,
                kv_layout=llama.kv_layout, sliding_context=False, windows=llama.layer_windows)
