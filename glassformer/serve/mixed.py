"""The engine's mixed step: one forward that decodes the running rows and feeds a joining chunk.

Chunked prefill (prefill.py) between decode steps costs each chunk a forward of its own, and a
forward reads every weight once, so a chunk of a few ids costs about a decode step whatever its
size: the prefill budget (budget.py) then shrinks chunks to one id, and a 4,000-id prompt takes
thousands of steps to join. Here the chunk rides in the decode step (vLLM's mixed batches): the
products take the running rows' ids and the chunk's ids stacked, attention is apart (each
decoded row over its row of the shared cache, the chunk causally over its small cache), and the
chunk's keys land in the small cache as `Prefill.feed` would write them (blocks/mixed_step.py).
A chunk then costs only its own work: its ids' share of the products and its attention.

    embed    the decoded ids (B,) and the chunk's (u, c), the token table's rows
    layers   blocks/mixed_step.py, on the fused step's kernels and operands
    head     final norm and LM head on the B decoded rows and the u chunk rows' last ids

It applies where the decoded step runs fused (blocks/decode_step.py's `decode_step_applies`: a
plain pre-norm LLaMA-family layer, float32, no adapters) to a `Prefill` (not the batch-invariant
`Aligned`, whose chunks keep fixed tiles: engine.py); anything else takes the separate chunk.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.decode_plan import cached_plan, decode_plan
from glassformer.blocks.decode_step import decode_step_applies
from glassformer.blocks.delta_state import HybridCache
from glassformer.blocks.lora import has_adapters
from glassformer.blocks.mixed_step import mixed_step_forward
from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import decode_kernels
from glassformer.models.common import head_forward, split_layers
from glassformer.ops.embedding import embedding_forward
from glassformer.ops.rope import rope_tables_at
from glassformer.serve.prefill import Prefill
from glassformer.serve.rows import RowCache


def mixed_applies(model, rows: RowCache, joining) -> bool:
    """Whether the mixed step can feed `joining` beside the decoded rows of `rows`."""
    if not isinstance(joining, Prefill) or isinstance(rows.cache, HybridCache):
        return False
    if model.family.name != "llama" or rows.cache.batch_invariant:
        return False
    cfg = model.cfg.block_config()
    x = np.zeros((1, 1, cfg.d_model), dtype=np.float32)
    tables = (x, x) if cfg.position == "rope" else None     # only tested for presence
    return (model.params["tok_emb"].dtype == np.float32
            and decode_step_applies(cfg, x, kv_cache=rows.cache,
                                    frozen=has_adapters(model.params), rope_tables=tables))


def _tables(cfg, positions: np.ndarray):
    """RoPE's cos and sin at positions (B, T) -> (B, T, D) each, or None without RoPE."""
    if cfg.position != "rope":
        return None
    theta, scaling = cfg.rope_at(0)
    return rope_tables_at(positions, cfg.dim_per_head, theta=theta, scaling=scaling,
                          dtype=np.float32)


def mixed_step(model, rows: RowCache, count: int, tokens: np.ndarray, active: np.ndarray,
               joining: Prefill, chunk: int) -> np.ndarray:
    """Decode the first `count` rows of `rows` (tokens (count,) fed to the active ones) and feed
    the next `chunk` columns of `joining`, in one forward; returns the decoded rows' logits
    (count, V) (the chunk's last logits land in `joining`, as its `feed` leaves them)."""
    params, cfg = model.params, model.cfg.block_config()
    positions, key_mask = rows.step_inputs(count, active)          # (count, 1), (count, S)
    chunk_ids, small_mask, chunk_positions = joining.next_columns(chunk)   # (u, c) ...
    plan = cached_plan(params, rows.cache)
    if plan is None:
        plan = rows.cache.decode_plan = decode_plan(params,
                                                    split_layers(params, model.cfg.n_layer))
    x_dec, _ = embedding_forward(tokens, params["tok_emb"])             # (count, C)
    x_chunk, _ = embedding_forward(chunk_ids, params["tok_emb"])        # (u, c, C)
    dec_tables = _tables(cfg, positions)                                # (count, 1, D) x 2
    if dec_tables is not None:
        dec_tables = tuple(np.ascontiguousarray(t[:, 0]) for t in dec_tables)   # (count, D)
    kernels = decode_kernels() or decode_numpy
    x_dec, x_last = mixed_step_forward(
        kernels, plan, x_dec.astype(np.float32), x_chunk.astype(np.float32), cfg,
        cache=rows.view(count), key_mask=key_mask, dec_tables=dec_tables, small=joining.small,
        small_mask=small_mask, chunk_tables=_tables(cfg, chunk_positions))
    logits, _ = head_forward(params, np.concatenate([x_dec, x_last])[:, None], cfg)
    rows.stepped(count, tokens, active)
    joining.advanced(chunk_ids.shape[1], logits[count:, 0])
    return logits[:count, 0]                                            # (count, V)
