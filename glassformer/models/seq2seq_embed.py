"""The encoder-decoder's embedding: what turns one stack's ids into its first layer's input.

    embed(ids) = dropout([emb_norm](tok_emb[ids] * [sqrt(C)] + positions))        (B, T, C)

The encoder and the decoder each run this once (side "enc" or "dec": their own pos_emb and
emb_norm live under that prefix; the token table is the shared "tok_emb" unless the config keeps
a separate "enc.tok_emb"). Positions are a learned table (BART: rows start pos_offset = 2 before
position 0) or the fixed [sin | cos] sinusoids of ops/position.py (the paper, Marian).
`cfg` is always a Seq2SeqConfig (models/seq2seq.py, which builds on this file).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.blocks.names import prefixed, sub_params
from glassformer.blocks.norm import NormCtx, norm_backward, norm_forward, norm_shapes
from glassformer.models.common import check_ids_and_positions
from glassformer.ops.dropout import DropoutCtx, dropout_backward, dropout_forward
from glassformer.ops.embedding import EmbeddingCtx, embedding_backward, embedding_forward
from glassformer.ops.position import fixed_position_table


class EmbedCtx(NamedTuple):
    tok: EmbeddingCtx
    scale: float                  # sqrt(C) or 1.0
    pos: EmbeddingCtx | None      # learned positions only
    norm: NormCtx | None          # emb_norm only
    drop: DropoutCtx


def embed_shapes(cfg, side: str) -> dict[str, tuple[int, ...]]:
    """One stack's embedding params under "enc." or "dec." (the shared tok_emb is top-level)."""
    shapes = {}
    if side == "enc" and not cfg.share_embeddings:
        shapes["enc.tok_emb"] = (cfg.vocab_size, cfg.d_model)                    # (V, C)
    if cfg.positions == "learned":
        shapes[f"{side}.pos_emb"] = (cfg.max_seq_len + cfg.pos_offset, cfg.d_model)
    if cfg.emb_norm:
        shapes.update(prefixed(norm_shapes(cfg.block_config()), f"{side}.emb_norm."))
    return shapes


def embed_forward(params: dict, ids: np.ndarray, cfg, side: str, offset: int, train: bool,
                  rng) -> tuple[np.ndarray, EmbedCtx]:
    """ids (B, T) at positions offset .. offset + T - 1 -> the stack's input (B, T, C)."""
    positions = check_ids_and_positions(ids, None, offset, cfg.max_seq_len)       # (T,)
    own_table = side == "enc" and not cfg.share_embeddings
    tok, tok_ctx = embedding_forward(ids, params["enc.tok_emb" if own_table else "tok_emb"])
    scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
    pos_ctx = None
    if cfg.positions == "learned":
        # note: BART's table starts pos_offset = 2 rows before position 0 (rows 0, 1 unused)
        pos, pos_ctx = embedding_forward(positions + cfg.pos_offset,
                                         params[f"{side}.pos_emb"])            # (T,) -> (T, C)
    else:
        pos = fixed_position_table(ids.shape[1], cfg.d_model, offset=offset,
                                   dtype=tok.dtype)                            # (T, C)
    x = tok * scale + pos                                   # (B, T, C) + (T, C) -> (B, T, C)
    norm_ctx = None
    if cfg.emb_norm:
        x, norm_ctx = norm_forward(sub_params(params, f"{side}.emb_norm."), x,
                                   cfg.block_config())
    x, drop_ctx = dropout_forward(x, p=cfg.dropout, rng=rng, train=train)
    return x, EmbedCtx(tok_ctx, scale, pos_ctx, norm_ctx, drop_ctx)


def embed_backward(dx: np.ndarray, ctx: EmbedCtx, side: str) -> tuple[dict, np.ndarray]:
    """Returns (grads of the stack's pos_emb / emb_norm, d of the token table it read (V, C));
    the caller puts the token table's gradient where it belongs (shared or not)."""
    grads = {}
    dx = dropout_backward(dx, ctx.drop)
    if ctx.norm is not None:
        norm_grads, dx = norm_backward(dx, ctx.norm)
        grads.update(prefixed(norm_grads, f"{side}.emb_norm."))
    if ctx.pos is not None:
        # one position row served every batch item: sum over B first
        grads[f"{side}.pos_emb"] = embedding_backward(dx.sum(axis=0), ctx.pos)  # (T, C) rows
    dtable = embedding_backward(dx * ctx.scale, ctx.tok)                  # (B, T, C) -> (V, C)
    return grads, dtable
