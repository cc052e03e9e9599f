"""Pieces every model family shares: the layer stack, id checks, the final norm and LM head, and
a causal LM's whole top above its embeddings (init_decoder, decoder_forward,
token_embedding_grads).

The LM head is a linear layer without bias: its own (C, V) matrix `lm_head`, or, when the model
ties it to the token embedding, `tok_emb` (V, C) used transposed. Tying makes tok_emb fan out
(lookup at the input, projection at the output); the model adds the two gradients on one line.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.decode_plan import cached_plan, decode_plan
from glassformer.blocks.decode_step import decode_step_applies, decode_step_forward
from glassformer.blocks.hooks import run_hook
from glassformer.blocks.lora import has_adapters
from glassformer.blocks.names import prefixed, sub_params
from glassformer.blocks.norm import NormCtx, init_norm, norm_backward, norm_forward, norm_shapes
from glassformer.blocks.prefill_block import (layer_plan, prefill_block_applies,
                                              prefill_block_forward)
from glassformer.blocks.prefill_chunks import chunks_apply, prefill_in_chunks
from glassformer.blocks.prefill_rows import prefill_rows_forward, prefill_rows_head
from glassformer.blocks.residual import (BlockCtx, block_backward, block_forward, block_shapes,
                                         init_block)
from glassformer.errors import GlassformerError
from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import decode_kernels, prefill_kernels
from glassformer.ops.embedding import EmbeddingCtx, embedding_backward
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.rope import rope_tables_at


class LMHeadCtx(NamedTuple):
    linear: LinearCtx
    tied: bool


class HeadCtx(NamedTuple):
    """The decoder's top: final norm, then the LM head.

    rows, ids_shape: when the head ran on the N positions `rows` (np.nonzero's (rows, columns))
    of a (B, T) batch only, so that backward scatters dx back to (B, T, C); None otherwise.
    """
    norm_f: NormCtx
    lm_head: LMHeadCtx
    rows: tuple[np.ndarray, np.ndarray] | None = None
    ids_shape: tuple[int, int] | None = None


def check_ids_and_positions(ids, positions, offset: int, max_positions: int | None
                            ) -> np.ndarray:
    """ids must be (B, T) integers with T >= 1; returns positions, (T,) or (B, T).

    max_positions: the model's context (learned position table rows), or None when the model has
    no such limit.
    """
    if not isinstance(ids, np.ndarray) or ids.dtype.kind not in "iu":
        kind = ids.dtype if isinstance(ids, np.ndarray) else type(ids).__name__
        raise GlassformerError(f"expected ids to be an integer array of shape (B, T), got {kind}")
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise GlassformerError(f"expected ids of shape (B, T) with T >= 1, got {ids.shape}")
    t = ids.shape[1]
    if positions is None:
        positions = np.arange(offset, offset + t)
    if max_positions is not None and positions.size and int(positions.max()) >= max_positions:
        raise GlassformerError(
            f"sequence reaches position {int(positions.max())}, past the context of "
            f"max_seq_len={max_positions} (positions must be < {max_positions}); "
            f"crop the input to the last {max_positions} tokens")
    return positions


def lm_head_forward(params: dict, x: np.ndarray, *, frozen: bool = False
                    ) -> tuple[np.ndarray, LMHeadCtx]:
    """x (B, T, C) -> logits (B, T, V), with `lm_head` (C, V) or tied `tok_emb` (V, C).
    frozen: the head takes no gradient (a LoRA model)."""
    tied = "lm_head" not in params
    logits, ctx = linear_forward(x, head_weight(params), frozen=frozen)   # (B, T, C) -> (B, T, V)
    return logits, LMHeadCtx(ctx, tied)


def head_weight(params: dict) -> np.ndarray:
    """The LM head's (C, V) matrix: `lm_head`, or `tok_emb` (V, C) transposed (a view)."""
    return params["tok_emb"].T if "lm_head" not in params else params["lm_head"]


def lm_head_backward(dlogits: np.ndarray, ctx: LMHeadCtx) -> tuple[dict, np.ndarray]:
    """Returns ({"lm_head": dW} or {"tok_emb": dW^T}, dx) — the caller adds a tied gradient;
    ({}, dx) when the head was frozen."""
    dx, dw, _ = linear_backward(dlogits, ctx.linear)              # dw (C, V), None when frozen
    if dw is None:
        return {}, dx
    if ctx.tied:
        return {"tok_emb": dw.T}, dx                              # (C, V) -> (V, C)
    return {"lm_head": dw}, dx


def layers_shapes(bcfg: BlockConfig, n_layer: int) -> dict[str, tuple[int, ...]]:
    """Param names and shapes of n_layer blocks under "blocks.{i}.", in init_layers' order."""
    shapes = {}
    for i in range(n_layer):
        shapes.update(prefixed(block_shapes(bcfg, layer=i), f"blocks.{i}."))
    return shapes


def init_layers(bcfg: BlockConfig, n_layer: int, rng: np.random.Generator, *, std: float,
                out_std: float) -> dict:
    """Fresh params for n_layer blocks under "blocks.{i}.", drawn layer by layer."""
    params = {}
    for i in range(n_layer):
        params.update(prefixed(init_block(bcfg, rng, std=std, out_std=out_std, layer=i),
                               f"blocks.{i}."))
    return params


def layers_forward(params: dict, x: np.ndarray, bcfg: BlockConfig, n_layer: int, *,
                   causal: bool, on_layer=None,
                   **block_kwargs) -> tuple[np.ndarray, list[BlockCtx] | None]:
    """The stack of n_layer blocks. x (B, T, C) -> (B, T, C). block_kwargs: key_mask,
    positions, kv_cache, train, rng (see blocks/residual.py: block_forward).

    With a KV cache (generation) no backward follows, so no block's ctx is kept (None): each
    layer's activations are freed as the next layer runs, instead of L layers' worth staying
    alive until the forward ends (gigabytes for a long prompt).

    on_layer(i, ctx, x_in, x_out), when given, is called after each layer with its ctx and the
    stream entering and leaving it; the ctx is then not kept either (None): the viewer reads a
    long text layer by layer and keeps only the layers it shows.

    block_kwargs may hold `hooks` (blocks/hooks.py): functions at blocks.{i}.hook_resid_pre
    and hook_resid_post, here, and at the points inside each block, which may replace them.

    Params holding LoRA adapters make a LoRA model: every block runs its base weights frozen
    (blocks/lora.py), so the backward computes grads for the adapters (and norms) only.

    A decoded step (one position, a KV cache, plain pre-norm layers) runs on the fused kernels of
    blocks/decode_step.py when kernels/choice.py selects the compiled path: same numbers to
    float32 rounding, a few calls per layer instead of ~40. A cache marked `batch_invariant`
    (serve --batch-invariant) takes that path on the NumPy twins too; a cache marked
    `prefill_rows` (its prefill) runs blocks/prefill_rows.py, each row's ids as alone."""
    cache = block_kwargs.get("kv_cache")
    if cache is not None and cache.prefill_rows:
        # serve --batch-invariant's prefill: each row's ids as alone (blocks/prefill_rows.py)
        return prefill_rows_forward(decode_kernels() or decode_numpy,
                                    split_layers(params, n_layer), x, bcfg, **block_kwargs), None
    tables = {}   # (theta, scaling) -> the cos/sin tables every layer of that RoPE shares
    if bcfg.position == "rope" and block_kwargs.get("positions") is not None:
        # layers rotate by the same angles (or, Gemma 3, by one of two bases): make each set of
        # cos/sin tables once, pass it down
        for setting in {bcfg.rope_at(i) for i in range(n_layer)}:
            tables[setting] = rope_tables_at(block_kwargs["positions"], bcfg.dim_per_head,
                                             theta=setting[0], scaling=setting[1],
                                             dtype=x.dtype)
    cache = block_kwargs.get("kv_cache")
    # a decoding cache keeps the fused step's operands from its first step (blocks/decode_plan.py)
    plan = None if cache is None else cached_plan(params, cache)
    layers = None if plan is not None else split_layers(params, n_layer)
    block_kwargs["frozen"] = plan.frozen if plan is not None else has_adapters(params)
    block_kwargs["rope_tables"] = tables.get(bcfg.rope_at(0))
    if (causal and on_layer is None and block_kwargs.get("hooks") is None
            and decode_step_applies(bcfg, x, **block_kwargs)):
        # one decoded position: the fused kernels when a compiled path is on (kernels/choice.py:
        # GLASSFORMER_KERNELS), else the blocks below, the reference; the only place that asks
        kernels = decode_kernels()
        if kernels is None and cache.batch_invariant:
            # serve --batch-invariant on the NumPy path: the twins, which attend each row over
            # its own keys (the blocks below mask one batch, summing where other rows' keys sit)
            kernels = decode_numpy
        if kernels is not None:
            if plan is None:
                plan = cache.decode_plan = decode_plan(params, layers)
            return decode_step_forward(kernels, plan, x, bcfg, **block_kwargs), None
    if layers is None:
        layers = split_layers(params, n_layer)
    if (causal and on_layer is None and block_kwargs.get("hooks") is None
            and prefill_block_applies(bcfg, x, **block_kwargs)):
        # a long prompt's prefill: chunks of positions over threads (blocks/prefill_block.py)
        kernels = prefill_kernels()
        ops = None if kernels is None else layer_plan(layers)
        if ops is not None:
            return prefill_block_forward(kernels, ops, x, bcfg, **block_kwargs), None
    keep = block_kwargs.get("kv_cache") is None and on_layer is None
    hooks = block_kwargs.get("hooks")
    ctxs = []
    for i in range(n_layer):
        if hooks is not None:
            x = run_hook(hooks, f"blocks.{i}.hook_resid_pre", x)
        x_in = x
        block_kwargs["rope_tables"] = tables.get(bcfg.rope_at(i))
        x, ctx = block_forward(layers[i], x, bcfg, causal=causal, layer=i, **block_kwargs)
        if hooks is not None:
            x = run_hook(hooks, f"blocks.{i}.hook_resid_post", x)
        if on_layer is not None:
            on_layer(i, ctx, x_in, x)
        if keep:
            ctxs.append(ctx)
        del ctx, x_in  # note: a ctx not kept is freed here, before the next layer makes its own
    return x, ctxs if keep else None


def split_layers(params: dict, n_layer: int) -> list[dict]:
    """[params of layer i with "blocks.{i}." removed] for every layer, in one pass over keys."""
    layers = [{} for _ in range(n_layer)]
    for key, value in params.items():
        if key.startswith("blocks."):
            index, _, local = key[len("blocks."):].partition(".")
            layers[int(index)][local] = value
    return layers


def layers_backward(dx: np.ndarray, ctxs: list[BlockCtx] | None,
                    drouter_logits: dict[int, np.ndarray] | None = None
                    ) -> tuple[dict, np.ndarray]:
    """Walk the blocks in reverse: returns (grads under "blocks.{i}.", dx).

    drouter_logits: {layer: (N, E)} gradients on sparse layers' router logits (balance losses)."""
    if ctxs is None:
        raise GlassformerError("a forward run with a KV cache is inference only; "
                               "run the forward without kv_cache to train")
    grads = {}
    for i in reversed(range(len(ctxs))):
        extra = None if drouter_logits is None else drouter_logits.get(i)
        block_grads, dx, _ = block_backward(dx, ctxs[i], drouter_logits=extra)
        grads.update(prefixed(block_grads, f"blocks.{i}."))
    return grads, dx


def head_shapes(cfg, bcfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """norm_f, plus lm_head (C, V) unless the config ties the head to tok_emb."""
    shapes = prefixed(norm_shapes(bcfg), "norm_f.")
    if not cfg.tie_embeddings:
        shapes["lm_head"] = (cfg.d_model, cfg.vocab_size)                    # (C, V)
    return shapes


def init_head(cfg, bcfg: BlockConfig, rng: np.random.Generator, *, std: float) -> dict:
    """norm_f (scale 1), plus an lm_head ~ Normal(0, std) unless tied (head_shapes' names)."""
    shapes = head_shapes(cfg, bcfg)
    params = prefixed(init_norm(bcfg), "norm_f.")
    if "lm_head" in shapes:
        params["lm_head"] = (rng.standard_normal(shapes["lm_head"]) * std).astype(np.float32)
    return params


def head_forward(params: dict, x: np.ndarray, bcfg: BlockConfig, *, frozen: bool = False
                 ) -> tuple[np.ndarray, HeadCtx]:
    """Final norm and LM head: (B, T, C) -> logits (B, T, V). frozen: a LoRA model's head, which
    computes no weight gradient."""
    x, norm_ctx = norm_forward(sub_params(params, "norm_f."), x, bcfg)
    logits, head_ctx = lm_head_forward(params, x, frozen=frozen)      # (B, T, C) -> (B, T, V)
    return logits, HeadCtx(norm_ctx, head_ctx)


def head_backward(dlogits: np.ndarray, ctx: HeadCtx) -> tuple[dict, np.ndarray]:
    """Returns (grads of lm_head, or a "tok_emb" part when tied, and of norm_f; dx (B, T, C)).

    note: when tied, grads["tok_emb"] holds only the head's share; the model adds the lookup's.
    """
    grads, dx = lm_head_backward(dlogits, ctx.lm_head)
    norm_grads, dx = norm_backward(dx, ctx.norm_f)
    grads.update(prefixed(norm_grads, "norm_f."))
    if ctx.rows is not None:
        # the positions the head skipped get no gradient; each chosen one appears once, so a
        # plain scatter (no add.at)
        chosen = dx
        dx = np.zeros(ctx.ids_shape + chosen.shape[-1:], dtype=chosen.dtype)
        dx[ctx.rows] = chosen                                         # (N, C) -> (B, T, C)
    return grads, dx


def head_input(ctx: HeadCtx | LMHeadCtx) -> np.ndarray:
    """What the LM head read, (B, T, C): the last hidden state, after the final norm when the
    model has one (HeadCtx), as its linear's ctx keeps it for dW (not when frozen: LoRA)."""
    lm_head = ctx.lm_head if isinstance(ctx, HeadCtx) else ctx
    return lm_head.linear.x


# ---------------------------------------------------------------- a causal LM above its embeddings
# GPT-2 and LLaMA differ below the layers (learned positions and dropout, or neither) and in their
# blocks' flags; from the embedded input up, and in the tied embedding's gradient, they are the
# same, written once here.

def init_decoder(cfg, rng: np.random.Generator, *, std: float) -> dict:
    """GPT-2's init of the layers and head, which LLaMA shares: Normal(0, std), except the two
    projections that write into the residual stream (attn.wo, mlp.w_down) at std / sqrt(2 L),
    since L layers each add two of them to the same stream. Drawn layer by layer, then the head."""
    bcfg = cfg.block_config()
    out_std = std / math.sqrt(2 * cfg.n_layer)
    params = init_layers(bcfg, cfg.n_layer, rng, std=std, out_std=out_std)
    params.update(init_head(cfg, bcfg, rng, std=std))
    return params


def decoder_forward(params: dict, x: np.ndarray, bcfg: BlockConfig, n_layer: int, *,
                    frozen: bool, last_only: bool,
                    head_rows: tuple[np.ndarray, np.ndarray] | None = None, **block_kwargs
                    ) -> tuple[np.ndarray, list[BlockCtx] | None, HeadCtx]:
    """Causal layers, final norm and LM head: x (B, T, C) -> (logits (B, T, V), the blocks'
    ctxs, the head's ctx). last_only: the logits of the last position only, (B, 1, V)
    (generation reads no other: the head then skips T - 1 rows). head_rows: the N (row,
    column) positions, as np.nonzero gives them, whose logits a loss reads (fine-tuning counts
    only the replies): the logits are then (N, V), those rows of the full logits, and the head's
    backward scatters dx back. frozen: a LoRA model, whose head computes no weight gradient.
    block_kwargs: as layers_forward's. A cached forward of more than prefill_chunks.CHUNK new
    columns (a long prompt's prefill) runs the layers chunk by chunk (blocks/prefill_chunks.py):
    the same logits to float32 rounding, its activations bounded by the chunk."""
    ids_shape = x.shape[:2]
    if (head_rows is None and block_kwargs.get("on_layer") is None
            and block_kwargs.get("hooks") is None and chunks_apply(x, **block_kwargs)):
        # a long prefill: the layers chunk by chunk, activations bounded (blocks/prefill_chunks.py)
        x, block_ctxs = prefill_in_chunks(
            lambda part, **kwargs: layers_forward(params, part, bcfg, n_layer, causal=True,
                                                  **kwargs)[0],
            x, last_only=last_only, **block_kwargs), None
    else:
        x, block_ctxs = layers_forward(params, x, bcfg, n_layer, causal=True, **block_kwargs)
    if last_only:
        x = x[:, -1:]                                                 # (B, T, C) -> (B, 1, C)
    cache = block_kwargs.get("kv_cache")
    if last_only and cache is not None and cache.prefill_rows:        # as alone, on fixed tiles
        logits = prefill_rows_head(decode_kernels() or decode_numpy,
                                   sub_params(params, "norm_f."), head_weight(params), x, bcfg)
        return logits, block_ctxs, None
    if head_rows is not None:
        x = x[head_rows]                                              # (B, T, C) -> (N, C)
    logits, head_ctx = head_forward(params, x, bcfg, frozen=frozen)   # (..., C) -> (..., V)
    if head_rows is not None:
        head_ctx = head_ctx._replace(rows=head_rows, ids_shape=ids_shape)
    return logits, block_ctxs, head_ctx


def token_embedding_grads(dx: np.ndarray, tok_ctx: EmbeddingCtx, head_grads: dict) -> dict:
    """The grads of tok_emb and of the head (head_backward's): the lookup's share of tok_emb from
    dx (B, T, C), plus the head's share when the head is tied to it."""
    grads = {"tok_emb": embedding_backward(dx, tok_ctx)}                 # (B, T, C) -> (V, C)
    head_grads = dict(head_grads)
    if "tok_emb" in head_grads:
        grads["tok_emb"] = grads["tok_emb"] + head_grads.pop("tok_emb")  # fan-out: tied lm_head
    grads.update(head_grads)
    return grads
