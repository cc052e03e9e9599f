"""LLaMA (Touvron et al. 2023) and its close kin Qwen2 and Mistral, composed of the shared blocks.

    ids (B, T) -> tok_emb[ids]                                        (B, T, C)
               -> L x pre-norm block (RMSNorm, attention with RoPE and grouped KV heads,
                                      RMSNorm, SwiGLU MLP)
               -> norm_f (RMSNorm) -> x @ lm_head  (or x @ tok_emb^T when tied)   (B, T, V)

Positions enter only inside attention, by rotating q and k (RoPE, HF's rotate-half layout, base
`rope_theta`); there is no position table, so nothing is added to the embeddings. Grouped-query
attention (n_kv_head < n_head) shares each K/V head among n_head / n_kv_head query heads:

    query heads   q0 q1 | q2 q3 | q4 q5        H = 6
    kv heads        k0  |   k1  |   k2         K = 3, each used by G = 2 query heads

Mistral (and Qwen2 when it turns its window on) slides an attention window: with
`sliding_window` W each query sees only its W newest keys (ops/attention.py), in every layer but
those listed in `full_layers`; generate then keeps a ring of W positions per windowed layer
(blocks/kv_cache.py), so decoding memory stays flat past the window.

Matches HF `LlamaForCausalLM`, `Qwen2ForCausalLM` (qkv_bias=True) and `MistralForCausalLM`
(its sliding window included) when loaded from their weights: RMSNorm with eps
inside the square root, SiLU-gated MLP without biases, RoPE plain or scaled (rope_type linear,
dynamic, llama3 or yarn, as transformers computes them: ops/rope_scaling.py).
Init: Normal(0, 0.02) everywhere, with attn.wo and mlp.w_down scaled by 1/sqrt(2 L) as in GPT-2
(HF initialises those with plain 0.02); norm gains start at 1.
LoRA: params holding adapters (blocks/lora.py) make a LoRA model; its backward returns the
adapters' grads only, computing no weight gradient on the way (and skipping the embedding's).
Deviations (training only): dropout (LLaMA has none) acts on sub-block outputs; when config.json
sets pad_token_id, HF's embedding gives that row no lookup gradient, glassformer treats it alike.
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
from glassformer.errors import GlassformerError
from glassformer.models.family import (CAUSAL, Family, FamilyConfig, check_config_values,
                                       check_sizes)
from glassformer.ops.embedding import EmbeddingCtx, embedding_forward
from glassformer.ops.rope_scaling import RopeScaling

SWIGLU_MULTIPLE = 8  # d_ff=None rounds 8 C / 3 up to a multiple of this


@dataclass(frozen=True)
class LlamaConfig(FamilyConfig):
    ARCH: ClassVar[str] = "llama"
    vocab_size: int = 65            # V
    max_seq_len: int = 64           # T_max, the longest sequence RoPE was trained for
    n_layer: int = 4                # L
    n_head: int = 4                 # H, query heads
    n_kv_head: int | None = None    # K, key/value heads (None: n_head, i.e. no grouping)
    d_model: int = 128              # C
    d_ff: int | None = None         # F (None: 8 C / 3 rounded up to a multiple of 8)
    norm_eps: float = 1e-6          # RMSNorm eps, inside the square root
    rope_theta: float = 10000.0     # RoPE base
    qkv_bias: bool = False          # biases on q, k, v projections (Qwen2)
    out_bias: bool = False          # bias on the attention output (LLaMA's attention_bias=True)
    tie_embeddings: bool = False    # lm_head is tok_emb^T (SmolLM2, small Qwen2 models)
    dropout: float = 0.0            # on sub-block outputs, training only
    head_dim: int | None = None     # D (None: d_model // n_head)
    # RoPE scaling (ops/rope_scaling.py), for contexts longer than the pretraining one:
    rope_type: str = "default"      # "default" (plain), "linear", "dynamic", "llama3", "yarn"
    rope_factor: float = 1.0        # how many times longer than the original context
    rope_original_max_seq_len: int | None = None  # the pretraining context (dynamic/llama3/yarn)
    rope_low_freq_factor: float = 1.0    # llama3: wavelengths past N / this are divided
    rope_high_freq_factor: float = 4.0   # llama3: wavelengths under N / this are kept
    rope_beta_fast: float = 32.0    # yarn: pairs turning more often over N are kept
    rope_beta_slow: float = 1.0     # yarn: pairs turning less often are divided
    rope_attention_factor: float | None = None  # yarn: cos/sin scale (None: 0.1 ln(factor) + 1)
    rope_truncate: bool = True      # yarn: ramp ends rounded to whole pairs
    sliding_window: int | None = None   # W: each query sees its W newest keys (None: all)
    full_layers: tuple[int, ...] = ()   # layers that attend to every key despite the window

    def __post_init__(self):
        check_config_values(self)  # types first: no inf, no 2.0 layers, no True heads
        check_sizes(self)
        check_layer_list(self, "full_layers")
        self.block_config()  # validates heads vs d_model, even head dim, dropout range

    @property
    def hidden(self) -> int:
        """F, the SwiGLU width: d_ff, or 2/3 of GPT's 4 C (same parameter count as a plain MLP)."""
        if self.d_ff is not None:
            return self.d_ff
        return -(-8 * self.d_model // (3 * SWIGLU_MULTIPLE)) * SWIGLU_MULTIPLE

    def block_config(self) -> BlockConfig:
        return BlockConfig(d_model=self.d_model, n_head=self.n_head, n_kv_head=self.n_kv_head,
                           d_ff=self.hidden, head_dim=self.head_dim, norm="rms",
                           norm_eps=self.norm_eps, norm_bias=False, norm_position="pre",
                           mlp="swiglu", qkv_bias=self.qkv_bias, out_bias=self.out_bias,
                           mlp_bias=False, position="rope", rope_theta=self.rope_theta,
                           rope_scaling=self.rope_scaling(), dropout=self.dropout,
                           window=self.sliding_window, full_layers=self.full_layers)

    def rope_scaling(self) -> RopeScaling | None:
        """The rope_* fields as one record for the attention blocks (None: plain RoPE)."""
        if self.rope_type == "default":
            return None
        return RopeScaling(rope_type=self.rope_type, factor=self.rope_factor,
                           original_max_len=self.rope_original_max_seq_len,
                           low_freq_factor=self.rope_low_freq_factor,
                           high_freq_factor=self.rope_high_freq_factor,
                           beta_fast=self.rope_beta_fast, beta_slow=self.rope_beta_slow,
                           attention_factor=self.rope_attention_factor,
                           truncate=self.rope_truncate)


def check_layer_list(cfg, name: str) -> None:
    """A config's list of layer indices (from JSON, a list) kept as a tuple of layers that
    exist, so configs compare equal however they were read."""
    layers = tuple(int(i) for i in getattr(cfg, name))
    object.__setattr__(cfg, name, layers)
    outside = [i for i in layers if not 0 <= i < cfg.n_layer]
    if outside:
        raise GlassformerError(f"{name} names layer {outside[0]}, but the model has layers 0 to "
                               f"{cfg.n_layer - 1}")


def layer_windows(cfg) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention), as its attention block reads it."""
    bcfg = cfg.block_config()
    return tuple(bcfg.window_at(i) for i in range(cfg.n_layer))


def kv_layout(cfg: LlamaConfig) -> KVLayout:
    """This model's KV cache: only the n_kv_head shared heads are stored, D wide each."""
    bcfg = cfg.block_config()
    return KVLayout(heads=bcfg.kv_heads, key_dim=bcfg.dim_per_head, value_dim=bcfg.dim_per_head)


class LlamaCtx(NamedTuple):
    tok: EmbeddingCtx
    blocks: list[BlockCtx] | None   # None after a cached (generation) forward
    head: HeadCtx
    frozen: bool = False            # a LoRA model: only the adapters take gradients


def param_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """The name and shape of every param, in init_params' order."""
    bcfg = cfg.block_config()
    shapes = {"tok_emb": (cfg.vocab_size, cfg.d_model)}                      # (V, C)
    shapes.update(layers_shapes(bcfg, cfg.n_layer))
    shapes.update(head_shapes(cfg, bcfg))
    return shapes


def init_params(cfg: LlamaConfig, rng: np.random.Generator) -> dict:
    """Fresh float32 params (see module docstring for the init), param_shapes' names."""
    std = 0.02
    shapes = param_shapes(cfg)
    params = {"tok_emb": (rng.standard_normal(shapes["tok_emb"]) * std).astype(np.float32)}
    params.update(init_decoder(cfg, rng, std=std))      # then the layers and the head
    return params


def forward(params: dict, ids: np.ndarray, cfg: LlamaConfig, *, train: bool = False,
            rng: np.random.Generator | None = None, key_mask: np.ndarray | None = None,
            positions: np.ndarray | None = None, kv_cache: KVCache | None = None,
            last_only: bool = False, head_rows: tuple[np.ndarray, np.ndarray] | None = None,
            on_layer=None, hooks: dict | None = None) -> tuple[np.ndarray, LlamaCtx]:
    """ids (B, T) -> logits (B, T, V), or (B, 1, V) for the last position only with last_only
    (generation reads no other: the LM head then skips T - 1 rows).

    key_mask (B, S): True for real tokens (left padding is False). positions: (T,) or (B, T)
    absolute positions fed to RoPE (default: kv_cache.length + arange(T)).
    head_rows: the N positions (np.nonzero's (rows, columns)) a loss reads; the logits are then
    (N, V), those rows of the full logits (models/common.py: decoder_forward).
    hooks: functions at hook_embed and every layer's points, which may replace those values
    (blocks/hooks.py; glassformer/interpret/ uses them); None: none.
    """
    offset = 0 if kv_cache is None else kv_cache.length
    positions = check_ids_and_positions(ids, positions, offset, cfg.max_seq_len)
    bcfg = cfg.block_config()
    frozen = has_adapters(params)
    x, tok_ctx = embedding_forward(ids, params["tok_emb"])            # (B, T) -> (B, T, C)
    if hooks is not None:
        x = run_hook(hooks, "hook_embed", x)
    logits, block_ctxs, head_ctx = decoder_forward(
        params, x, bcfg, cfg.n_layer, frozen=frozen, last_only=last_only, head_rows=head_rows,
        key_mask=key_mask, positions=positions, kv_cache=kv_cache, train=train, rng=rng,
        on_layer=on_layer, hooks=hooks)                                 # (B, T, C) -> (B, T, V)
    return logits, LlamaCtx(tok_ctx, block_ctxs, head_ctx, frozen)


def backward(dlogits: np.ndarray, ctx: LlamaCtx, *,
             drouter_logits: dict[int, np.ndarray] | None = None) -> dict:
    """dlogits (B, T, V) -> grads for every param, same keys as `params` (a LoRA model: for its
    adapters only). drouter_logits {layer: (N, E)}: a balance loss's gradient on the router
    logits of a mixture-of-experts layer (train/objectives/moe_next_token.py)."""
    head_grads, dx = head_backward(dlogits, ctx.head)
    grads, dx = layers_backward(dx, ctx.blocks, drouter_logits)
    if ctx.frozen:
        return adapter_grads(grads)  # nothing below the layers trains: the embedding is skipped
    grads.update(token_embedding_grads(dx, ctx.tok, head_grads))  # tok_emb, and the head's
    return grads


# RoPE positions are not learned, but no model was trained past its context: generation stops.
FAMILY = Family(name="llama", kind=CAUSAL, config=LlamaConfig,
                init_params=init_params, forward=forward, backward=backward,
                param_shapes=param_shapes, kv_layout=kv_layout,
                sliding_context=False, windows=layer_windows)
