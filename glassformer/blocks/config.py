"""BlockConfig: every switch that tells one Transformer family's block from another.

Families differ by flags, not copies (STYLE.md §2):

    GPT-2   pre-norm, LayerNorm, GELU (tanh), biases everywhere, learned positions (in the model)
    LLaMA   pre-norm, RMSNorm, SwiGLU, no biases, RoPE, grouped KV heads
    Qwen2   as LLaMA, plus q/k/v biases
    BERT    post-norm, LayerNorm, GELU (erf), biases, learned positions + segments (in the model)
    Original Transformer  post-norm, LayerNorm, ReLU, sinusoidal positions (in the model)
    DeepSeek-V3  as LLaMA, with multi-head latent attention (`mla`, blocks/mla.py)
"""
from __future__ import annotations

from dataclasses import dataclass

from glassformer.errors import GlassformerError
from glassformer.ops.rope_scaling import RopeScaling

NORMS = ("layer", "rms")
NORM_POSITIONS = ("pre", "post")
MLPS = ("gelu", "gelu_tanh", "relu", "silu", "swiglu")
POSITIONS = ("none", "rope", "alibi")


@dataclass(frozen=True)
class MLAConfig:
    """The widths of DeepSeek's multi-head latent attention (blocks/mla.py)."""
    kv_lora_rank: int               # R, the latent every key and value head is made from
    qk_nope_head_dim: int           # Dn, the part of a query/key head without RoPE
    qk_rope_head_dim: int           # Dr, the RoPE part; one RoPE key is shared by every head
    v_head_dim: int                 # Dv, a value head
    q_lora_rank: int | None = None  # Rq, the queries' low rank (None: one plain projection)
    rope_interleave: bool = False   # RoPE pairs dims (2i, 2i+1), as DeepSeek's checkpoints
    mscale_all_dim: float = 0.0     # yarn: the softmax scale grows by mscale(factor, this)^2

    def __post_init__(self):
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                     "q_lora_rank"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise GlassformerError(f"MLA {name} must be an integer >= 1, got {value!r}")
        if self.qk_rope_head_dim % 2:
            raise GlassformerError(f"MLA needs an even qk_rope_head_dim, got "
                                   f"{self.qk_rope_head_dim}")


@dataclass(frozen=True)
class BlockConfig:
    d_model: int                    # C, the residual stream width
    n_head: int                     # H, query heads
    n_kv_head: int | None = None    # K, key/value heads (None: same as n_head)
    d_ff: int | None = None         # F, MLP hidden width (None: 4 * d_model)
    head_dim: int | None = None     # D (None: d_model // n_head)
    norm: str = "layer"             # "layer" (LayerNorm) or "rms" (RMSNorm)
    norm_eps: float = 1e-5          # eps inside the norm's square root
    norm_bias: bool = True          # LayerNorm has a shift b
    norm_position: str = "pre"      # "pre": x + f(norm(x)); "post": norm(x + f(x))
    mlp: str = "gelu"               # "gelu" (erf), "gelu_tanh", "relu", "silu" or "swiglu"
    qkv_bias: bool = True           # biases on the q, k, v projections
    out_bias: bool = True           # bias on the attention output projection
    mlp_bias: bool = True           # biases on the MLP projections
    position: str = "none"          # position info added inside attention: "rope", "alibi"
    rope_theta: float = 10000.0     # RoPE base
    rope_scaling: RopeScaling | None = None  # scaled RoPE frequencies (None: plain RoPE)
    dropout: float = 0.0            # residual dropout after attention and MLP (training only)
    mla: MLAConfig | None = None    # multi-head latent attention instead of q/k/v heads;
                                    # head_dim is then its RoPE width Dr (as HF's DeepSeek-V3)

    def __post_init__(self):
        for name, value, allowed in (("norm", self.norm, NORMS),
                                     ("norm_position", self.norm_position, NORM_POSITIONS),
                                     ("mlp", self.mlp, MLPS), ("position", self.position, POSITIONS)):
            if value not in allowed:
                raise GlassformerError(f"{name} must be one of {allowed}, got {value!r}")
        if self.head_dim is None and self.d_model % self.n_head:
            raise GlassformerError(f"n_head={self.n_head} must divide d_model={self.d_model}")
        if self.kv_heads < 1 or self.n_head % self.kv_heads:
            raise GlassformerError(f"n_head={self.n_head} must be a multiple of "
                                   f"n_kv_head={self.kv_heads}")
        if self.mla is not None and self.dim_per_head != self.mla.qk_rope_head_dim:
            raise GlassformerError(f"an MLA block's head_dim is its RoPE width "
                                   f"qk_rope_head_dim={self.mla.qk_rope_head_dim}, got "
                                   f"{self.dim_per_head}")
        if self.position == "rope" and self.dim_per_head % 2:
            raise GlassformerError(f"RoPE needs an even head dim D, got {self.dim_per_head}")

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def dim_per_head(self) -> int:
        return self.d_model // self.n_head if self.head_dim is None else self.head_dim

    @property
    def hidden(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff
