"""Decoding with the encoder-decoder (models/seq2seq.py), inference only: encode a source once,
then feed the decoder a few target tokens at a time through a KV cache. Generation state, not
backward state (STYLE.md §4): nothing here keeps a ctx. generate/beam.py builds on exactly this:

    encode(params, src_ids, cfg, *, src_mask=None) -> (memory (B, S, C), src_mask (B, S) bool)
    decode_start(params, memory, src_mask, cfg, max_len) -> DecodeState
        max_len: target tokens the state can hold (<= cfg.max_seq_len); projects every decoder
        layer's cross-attention k/v once
    decode_step(params, tgt_ids_new (B, t), state, cfg) -> logits (B, t, V)
        reads positions state.kv_cache.length .. + t; writes their keys/values but does NOT
        advance: the caller then calls `state.kv_cache.advance(t)` (only the decoding loop
        advances a cache, STYLE.md §4)
    select_rows(state, rows (N,) int) -> DecodeState with rows state[rows] (beam search: repeat
        each source K times, or reorder beams); fresh arrays, same length

Step by step, decode_step gives the same logits as forward over the whole prefix (tested).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.blocks.qkv import cross_kv
from glassformer.blocks.names import sub_params
from glassformer.blocks.residual import block_forward
from glassformer.errors import GlassformerError
from glassformer.models.common import split_layers
from glassformer.models.seq2seq import (Seq2SeqConfig, encoder_forward, final_norm_forward,
                                        logits_forward, source_mask)
from glassformer.models.seq2seq_embed import embed_forward


class DecodeState(NamedTuple):
    """Generation state of the decoder (not backward state): what decode_step reads and writes."""
    kv_cache: KVCache             # decoder self-attention, n_dec_layer x (B, H, T_max, D)
    cross_k: list[np.ndarray]     # per decoder layer (B, H, S, D), projected once from memory
    cross_v: list[np.ndarray]     # per decoder layer (B, H, S, D)
    src_mask: np.ndarray          # (B, S) bool, True for real source tokens


def encode(params: dict, src_ids: np.ndarray, cfg: Seq2SeqConfig, *,
           src_mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """src_ids (B, S) -> (memory (B, S, C), src_mask (B, S) bool), computed once per source."""
    src_mask = source_mask(src_ids, src_mask, cfg)
    memory, _ = encoder_forward(params, np.asarray(src_ids), src_mask, cfg, False, None)
    return memory, src_mask


def decode_start(params: dict, memory: np.ndarray, src_mask: np.ndarray, cfg: Seq2SeqConfig,
                 max_len: int) -> DecodeState:
    """An empty decoder state for up to max_len target tokens, with every decoder layer's
    cross-attention keys and values projected from memory (B, S, C) once."""
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or not (
            1 <= max_len <= cfg.max_seq_len):
        raise GlassformerError(f"max_len must be an integer in [1, max_seq_len="
                               f"{cfg.max_seq_len}], got {max_len!r}")
    if memory.ndim != 3 or memory.shape[2] != cfg.d_model:
        raise GlassformerError(f"expected memory of shape (B, S, C={cfg.d_model}), "
                               f"got {memory.shape}")
    src_mask = np.asarray(src_mask).astype(bool)
    if src_mask.shape != memory.shape[:2]:
        raise GlassformerError(f"source mask has shape {src_mask.shape} but memory has "
                               f"(B, S) = {memory.shape[:2]}")
    bcfg = cfg.block_config("dec")
    layers = split_layers(sub_params(params, "dec."), cfg.decoder_layers)
    cross = [cross_kv(sub_params(layer, "cross."), memory, bcfg) for layer in layers]
    layout = KVLayout(heads=bcfg.kv_heads, key_dim=bcfg.dim_per_head,
                      value_dim=bcfg.dim_per_head)                 # the decoder's self-attention
    cache = KVCache.allocate(layout, n_layer=cfg.decoder_layers, batch=memory.shape[0],
                             max_len=int(max_len), dtype=memory.dtype)
    return DecodeState(cache, [k for k, _ in cross], [v for _, v in cross], src_mask)


def decode_step(params: dict, tgt_ids: np.ndarray, state: DecodeState, cfg: Seq2SeqConfig
                ) -> np.ndarray:
    """The next-token logits (B, t, V) of t new target tokens (B, t) at positions
    state.kv_cache.length .. + t - 1. Writes their keys and values into the cache; the caller
    advances it (state.kv_cache.advance(t))."""
    x, _ = embed_forward(params, np.asarray(tgt_ids), cfg, "dec", state.kv_cache.length,
                         False, None)                                          # (B, t, C)
    bcfg = cfg.block_config("dec")
    for i, layer in enumerate(split_layers(sub_params(params, "dec."), cfg.decoder_layers)):
        # each layer writes its new keys and values into the cache and reads the cross k, v
        x, _ = block_forward(layer, x, bcfg, causal=True, kv_cache=state.kv_cache, layer=i,
                             memory_kv=(state.cross_k[i], state.cross_v[i]),
                             memory_mask=state.src_mask)
    x, _ = final_norm_forward(params, x, cfg, "dec")
    logits, _ = logits_forward(params, x, cfg)
    return logits


def select_rows(state: DecodeState, rows) -> DecodeState:
    """A state holding rows `rows` (N,) of `state` (repeats allowed): fresh arrays, same length.

    Beam search: select_rows(state, np.repeat(np.arange(B), K)) makes K beams per source, and
    select_rows(state, parent_rows) reorders them after each step."""
    rows = np.asarray(rows, dtype=np.int64)
    return DecodeState(state.kv_cache.select_rows(rows), [k[rows] for k in state.cross_k],
                       [v[rows] for v in state.cross_v], state.src_mask[rows])
