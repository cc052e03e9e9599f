"""Qwen3-Next and Qwen3.5 (text): a hybrid of Gated DeltaNet layers and gated full attention.

    ids (B, T) -> tok_emb[ids]                                              (B, T, C)
               -> L x pre-norm layer:  x + Mixer(RMSNorm(x)),  then  x + MLP(RMSNorm(x))
                  Mixer = Gated DeltaNet (blocks/gated_delta.py) in a linear_attention layer,
                          gated full attention (blocks/gated_attention.py) in a full_attention one
                  MLP   = SwiGLU, or the MoE of blocks/moe.py (softmax top-k, a shared expert
                          behind a sigmoid gate) in a sparse layer of a config with experts
               -> norm_f (RMSNorm) -> x @ lm_head                                 (B, T, V)

`full_layers` lists the full-attention layers (transformers' `layer_types`, as indices); every
other layer is linear. A layer's mixer params sit under "blocks.{i}.attn." (full) or
"blocks.{i}.linear." (Gated DeltaNet). Matches transformers' `Qwen3NextForCausalLM` and
`Qwen3_5ForCausalLM`
(io/hf/qwen3_next.py). Their RMSNorms scale by (1 + w) with w stored zero-centred; here the norms
hold 1 + w (converted on load and back on save), so every norm is ops/rms_norm.py's; the gated
norm inside Gated DeltaNet scales by w as stored.
Decoding keeps a HybridCache (blocks/delta_state.py): keys and values for the full layers, a
fixed-size state per row for the linear ones. Init: Normal(0, 0.02), residual-writing projections
at 0.02 / sqrt(2 L), norms 1, Gated DeltaNet's dt_bias 1 and a_log = log U(0.01, 16).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.blocks.delta_state import DeltaStateLayout, HybridCache
from glassformer.blocks.gated_attention import (gated_attention_backward,
                                                gated_attention_forward, gated_attention_shapes,
                                                init_gated_attention)
from glassformer.blocks.gated_delta import (GatedDeltaConfig, gated_delta_backward,
                                            gated_delta_forward, gated_delta_shapes,
                                            init_gated_delta)
from glassformer.blocks.kv_cache import KVLayout
from glassformer.blocks.lora import has_adapters
from glassformer.blocks.mlp import init_mlp, mlp_backward, mlp_forward, mlp_shapes
from glassformer.blocks.moe import MoECtx, init_moe, moe_backward, moe_forward, moe_shapes
from glassformer.blocks.names import prefixed
from glassformer.blocks.norm import norm_backward, norm_forward
from glassformer.errors import GlassformerError
from glassformer.models.common import (HeadCtx, check_ids_and_positions, head_backward,
                                       head_forward, head_shapes, init_head, split_layers,
                                       token_embedding_grads)
from glassformer.models.family import (CAUSAL, Family, FamilyConfig, check_config_values,
                                       check_sizes)
from glassformer.ops.embedding import EmbeddingCtx, embedding_forward
from glassformer.ops.rope import rope_tables_at


@dataclass(frozen=True)
class Qwen3NextConfig(FamilyConfig):
    ARCH: ClassVar[str] = "qwen3_next"
    vocab_size: int = 97            # V
    max_seq_len: int = 128          # T_max
    n_layer: int = 4                # L
    n_head: int = 4                 # H, full attention's query heads
    n_kv_head: int = 2              # K, its key/value heads
    d_model: int = 64               # C
    head_dim: int = 16              # D, full attention's head width
    d_ff: int = 96                  # F, the dense SwiGLU width
    norm_eps: float = 1e-6          # every RMSNorm's eps
    rope_theta: float = 10000.0     # RoPE base
    partial_rotary_factor: float = 0.25  # RoPE turns the first D * this dims of q and k
    tie_embeddings: bool = False    # lm_head is tok_emb^T
    full_layers: tuple[int, ...] = (3,)  # full-attention layers; the others are Gated DeltaNet
    linear_k_heads: int = 2         # Hk
    linear_v_heads: int = 4         # Hv, a multiple of Hk
    linear_k_head_dim: int = 8      # Dk
    linear_v_head_dim: int = 8      # Dv
    conv_width: int = 4             # W, the short conv's taps
    chunk_size: int = 64            # tokens per chunk of the chunked delta rule
    n_experts: int = 0              # E (0: every MLP dense, as Qwen3.5)
    experts_per_token: int = 2      # k
    expert_d_ff: int = 32           # one expert's width
    shared_d_ff: int = 0            # the shared expert's width (0: none)
    norm_topk_prob: bool = True     # the chosen weights divided by their sum
    sparse_step: int = 1            # layer i is sparse when (i + 1) % sparse_step == 0
    dense_layers: tuple[int, ...] = ()   # layers that keep the dense MLP (mlp_only_layers)

    def __post_init__(self):
        check_config_values(self)
        check_sizes(self)
        for name in ("full_layers", "dense_layers"):
            layers = tuple(int(i) for i in getattr(self, name))
            object.__setattr__(self, name, layers)
            outside = [i for i in layers if not 0 <= i < self.n_layer]
            if outside:
                raise GlassformerError(f"{name} names layer {outside[0]}, but the model has "
                                       f"layers 0 to {self.n_layer - 1}")
        if self.n_head % self.n_kv_head:
            raise GlassformerError(f"n_head={self.n_head} must be a multiple of "
                                   f"n_kv_head={self.n_kv_head}")
        if self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.head_dim:
            raise GlassformerError(f"partial_rotary_factor={self.partial_rotary_factor} of "
                                   f"head_dim={self.head_dim} must give an even width >= 2")
        self.delta_config()
        self.block_config()

    @property
    def rotary_dim(self) -> int:
        """R, the dims RoPE turns (as transformers: int(D * partial_rotary_factor))."""
        return int(self.head_dim * self.partial_rotary_factor)

    def layer_types(self) -> tuple[str, ...]:
        return tuple("full_attention" if i in self.full_layers else "linear_attention"
                     for i in range(self.n_layer))

    def delta_config(self) -> GatedDeltaConfig:
        return GatedDeltaConfig(d_model=self.d_model, k_heads=self.linear_k_heads,
                                v_heads=self.linear_v_heads, k_head_dim=self.linear_k_head_dim,
                                v_head_dim=self.linear_v_head_dim, conv_width=self.conv_width,
                                norm_eps=self.norm_eps, chunk_size=self.chunk_size)

    def sparse(self, layer: int) -> bool:
        return (self.n_experts > 0 and layer not in self.dense_layers
                and (layer + 1) % self.sparse_step == 0)

    def block_config(self) -> BlockConfig:
        """The norms' and MLP's flags (blocks/norm.py, mlp.py, moe.py)."""
        moe = None
        if self.n_experts:
            moe = MoEConfig(n_experts=self.n_experts, experts_per_token=self.experts_per_token,
                            expert_d_ff=self.expert_d_ff, norm_topk_prob=self.norm_topk_prob,
                            shared_d_ff=self.shared_d_ff, shared_gate=self.shared_d_ff > 0)
        return BlockConfig(d_model=self.d_model, n_head=self.n_head, n_kv_head=self.n_kv_head,
                           d_ff=self.d_ff, head_dim=self.head_dim, norm="rms",
                           norm_eps=self.norm_eps, norm_bias=False, mlp="swiglu",
                           qkv_bias=False, out_bias=False, mlp_bias=False, moe=moe)


def kv_layout(cfg: Qwen3NextConfig) -> KVLayout:
    """One full-attention layer's KV cache widths (the linear layers keep a state instead)."""
    return KVLayout(heads=cfg.n_kv_head, key_dim=cfg.head_dim, value_dim=cfg.head_dim)


def state_layout(cfg: Qwen3NextConfig) -> DeltaStateLayout:
    d = cfg.delta_config()
    return DeltaStateLayout(conv_dim=d.conv_dim, conv_width=d.conv_width, v_heads=d.v_heads,
                            k_head_dim=d.k_head_dim, v_head_dim=d.v_head_dim)


def new_cache(cfg: Qwen3NextConfig, batch: int, max_len: int, dtype) -> HybridCache:
    return HybridCache.allocate_hybrid(kv_layout(cfg), state_layout(cfg), cfg.layer_types(),
                                       batch=batch, max_len=max_len, dtype=dtype)


def cache_bytes(cfg: Qwen3NextConfig, batch: int, max_len: int, dtype) -> int:
    return HybridCache.hybrid_bytes(kv_layout(cfg), state_layout(cfg), cfg.layer_types(),
                                    rows=batch, context=max_len, dtype=dtype)


def _mixer(cfg: Qwen3NextConfig, layer: int) -> str:
    """The prefix of a layer's token mixer: "attn." (full attention) or "linear." (Gated
    DeltaNet), so that no name means two things."""
    return "attn." if layer in cfg.full_layers else "linear."


def _mixer_shapes(cfg: Qwen3NextConfig, layer: int) -> dict:
    if layer in cfg.full_layers:
        return gated_attention_shapes(cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.head_dim)
    return gated_delta_shapes(cfg.delta_config())


def param_shapes(cfg: Qwen3NextConfig) -> dict[str, tuple[int, ...]]:
    bcfg = cfg.block_config()
    shapes = {"tok_emb": (cfg.vocab_size, cfg.d_model)}
    for i in range(cfg.n_layer):
        layer = {"norm1.w": (cfg.d_model,), **prefixed(_mixer_shapes(cfg, i), _mixer(cfg, i)),
                 "norm2.w": (cfg.d_model,)}
        layer.update(prefixed(moe_shapes(bcfg) if cfg.sparse(i) else mlp_shapes(bcfg), "mlp."))
        shapes.update(prefixed(layer, f"blocks.{i}."))
    shapes.update(head_shapes(cfg, bcfg))
    return shapes


def init_params(cfg: Qwen3NextConfig, rng: np.random.Generator) -> dict:
    std = 0.02
    out_std = std / math.sqrt(2 * cfg.n_layer)
    bcfg = cfg.block_config()
    params = {"tok_emb": (rng.standard_normal((cfg.vocab_size, cfg.d_model)) * std
                          ).astype(np.float32)}
    for i in range(cfg.n_layer):
        layer = {"norm1.w": np.ones(cfg.d_model, np.float32)}
        if i in cfg.full_layers:
            mixer = init_gated_attention(_mixer_shapes(cfg, i), rng, std=std, out_std=out_std)
        else:
            mixer = init_gated_delta(cfg.delta_config(), rng, std=std, out_std=out_std)
        layer.update(prefixed(mixer, _mixer(cfg, i)))
        layer["norm2.w"] = np.ones(cfg.d_model, np.float32)
        init = init_moe if cfg.sparse(i) else init_mlp
        layer.update(prefixed(init(bcfg, rng, std=std, out_std=out_std), "mlp."))
        params.update(prefixed(layer, f"blocks.{i}."))
    params.update(init_head(cfg, bcfg, rng, std=std))
    return params


class LayerCtx(NamedTuple):
    norm1: object
    mixer: object          # GatedAttentionCtx or GatedDeltaCtx
    full: bool
    norm2: object
    mlp: object            # MLPCtx or MoECtx


class Qwen3NextCtx(NamedTuple):
    tok: EmbeddingCtx
    layers: list[LayerCtx] | None   # None after a cached (generation) forward
    head: HeadCtx


def _local(layer: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in layer.items() if k.startswith(prefix)}


def forward(params: dict, ids: np.ndarray, cfg: Qwen3NextConfig, *, train: bool = False,
            rng: np.random.Generator | None = None, key_mask: np.ndarray | None = None,
            positions: np.ndarray | None = None, kv_cache: HybridCache | None = None,
            last_only: bool = False, head_rows: tuple[np.ndarray, np.ndarray] | None = None,
            on_layer=None, hooks: dict | None = None) -> tuple[np.ndarray, Qwen3NextCtx]:
    """ids (B, T) -> logits (B, T, V) (or (B, 1, V) with last_only). key_mask (B, S) True for
    real tokens; positions (T,) or (B, T) for RoPE; kv_cache: a HybridCache (`new_cache`).
    head_rows: the N (row, column) positions a loss reads; logits are then (N, V)
    (models/common.py: decoder_forward)."""
    del train, rng  # no dropout in this family
    if hooks:
        raise GlassformerError("hook points (glassformer/interpret) are not in the Qwen3-Next / "
                               "Qwen3.5 forward yet")
    if has_adapters(params):
        raise GlassformerError("LoRA adapters on a Qwen3-Next / Qwen3.5 model are not "
                               "supported; fine-tune it with --full")
    if kv_cache is not None and not isinstance(kv_cache, HybridCache):
        raise GlassformerError("a Qwen3-Next model decodes with its own cache (model.new_cache):"
                               " a KV cache plus a state per linear-attention layer")
    offset = 0 if kv_cache is None else kv_cache.length
    positions = check_ids_and_positions(ids, positions, offset, cfg.max_seq_len)
    if kv_cache is not None and ids.shape[1] + offset > kv_cache.max_len:
        kv_cache.check_room(ids.shape[1])
    bcfg = cfg.block_config()
    dcfg = cfg.delta_config()
    x, tok_ctx = embedding_forward(ids, params["tok_emb"])                 # (B, T, C)
    tables = rope_tables_at(positions, cfg.rotary_dim, theta=cfg.rope_theta, dtype=x.dtype)
    keep = kv_cache is None and on_layer is None
    ctxs = []
    for i, layer in enumerate(split_layers(params, cfg.n_layer)):
        x_in = x
        h, n1 = norm_forward(_local(layer, "norm1."), x, bcfg)
        full = i in cfg.full_layers
        mixer_params = _local(layer, _mixer(cfg, i))
        if full:
            a, mctx = gated_attention_forward(mixer_params, h, n_head=cfg.n_head,
                                              n_kv=cfg.n_kv_head, eps=cfg.norm_eps,
                                              rope_tables=tables, key_mask=key_mask,
                                              kv_cache=kv_cache, layer=i)
        else:
            state = None if kv_cache is None else kv_cache.states[i]
            a, mctx = gated_delta_forward(mixer_params, h, dcfg, key_mask=key_mask, state=state)
        x = x + a
        m_in, n2 = norm_forward(_local(layer, "norm2."), x, bcfg)
        mlp_params = _local(layer, "mlp.")
        if cfg.sparse(i):
            m, mlp_ctx = moe_forward(mlp_params, m_in, bcfg, inference=not keep)
        else:
            m, mlp_ctx = mlp_forward(mlp_params, m_in, bcfg, inference=not keep)
        x = x + m
        ctx = LayerCtx(n1, mctx, full, n2, mlp_ctx)
        if on_layer is not None:
            on_layer(i, ctx, x_in, x)
        if keep:
            ctxs.append(ctx)
    ids_shape = x.shape[:2]
    if last_only:
        x = x[:, -1:]                                                      # (B, 1, C)
    if head_rows is not None:
        x = x[head_rows]                                                   # (N, C)
    logits, head_ctx = head_forward(params, x, bcfg)
    if head_rows is not None:
        head_ctx = head_ctx._replace(rows=head_rows, ids_shape=ids_shape)
    return logits, Qwen3NextCtx(tok_ctx, ctxs if keep else None, head_ctx)


def backward(dlogits: np.ndarray, ctx: Qwen3NextCtx, *,
             drouter_logits: dict | None = None) -> dict:
    """dlogits (B, T, V) -> grads for every param, same keys as `params`. The MoE balance
    losses' router gradients (drouter_logits) are not wired in for this family: refused."""
    if drouter_logits:
        raise GlassformerError("the MoE balance losses are not implemented for Qwen3-Next; "
                               "train it without them")
    if ctx.layers is None:
        raise GlassformerError("a forward run with a cache is inference only; "
                               "run the forward without kv_cache to train")
    grads, dx = head_backward(dlogits, ctx.head)
    head_grads = grads
    grads = {}
    for i in reversed(range(len(ctx.layers))):
        lc = ctx.layers[i]
        if isinstance(lc.mlp, MoECtx):
            mg, dm = moe_backward(dx, lc.mlp)
        else:
            mg, dm = mlp_backward(dx, lc.mlp)
        n2g, dm = norm_backward(dm, lc.norm2)
        dx = dx + dm                                                       # fan-out: residual
        if lc.full:
            ag, da = gated_attention_backward(dx, lc.mixer)
        else:
            ag, da = gated_delta_backward(dx, lc.mixer)
        n1g, da = norm_backward(da, lc.norm1)
        dx = dx + da                                                       # fan-out: residual
        layer = {**prefixed(n1g, "norm1."), **prefixed(ag, "attn." if lc.full else "linear."),
                 **prefixed(n2g, "norm2."),
                 **prefixed(mg, "mlp.")}
        grads.update(prefixed(layer, f"blocks.{i}."))
    grads.update(token_embedding_grads(dx, ctx.tok, head_grads))
    return grads


FAMILY = Family(name="qwen3_next", kind=CAUSAL, config=Qwen3NextConfig, init_params=init_params,
                forward=forward, backward=backward, param_shapes=param_shapes,
                kv_layout=kv_layout, sliding_context=False, new_cache=new_cache,
                cache_bytes=cache_bytes)
