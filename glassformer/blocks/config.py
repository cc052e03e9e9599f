"""BlockConfig: every switch that tells one Transformer family's block from another.

Families differ by flags, not copies (STYLE.md §2):

    GPT-2   pre-norm, LayerNorm, GELU (tanh), biases everywhere, learned positions (in the model)
    LLaMA   pre-norm, RMSNorm, SwiGLU, no biases, RoPE, grouped KV heads
    Qwen2   as LLaMA, plus q/k/v biases
    BERT    post-norm, LayerNorm, GELU (erf), biases, learned positions + segments (in the model)
    Original Transformer  post-norm, LayerNorm, ReLU, sinusoidal positions (in the model)
    DeepSeek-V3  as LLaMA, with multi-head latent attention (`mla`, blocks/mla.py)
    Mixtral, Qwen3-MoE, OLMoE  as LLaMA, with a sparse mixture-of-experts MLP (`moe`: MoEConfig)
    Mistral  as LLaMA, every layer a sliding window (`window`)
    Gemma 3  four norms a layer ("pre_post"), (1 + w) RMSNorm (`norm_offset`), GELU-gated MLP,
             5 windowed layers to 1 full (`window`, `full_layers`), a second RoPE base for the
             windowed ones (`local_rope_theta`), its own score scale (`attn_scale`)
    gpt-oss  windows on alternate layers, attention sinks (`attn_sinks`), q/k/v/o biases
"""
from __future__ import annotations

from dataclasses import dataclass

from glassformer.errors import GlassformerError, check_choice
from glassformer.ops.moe_router import SCORINGS
from glassformer.ops.rope_scaling import RopeScaling

NORMS = ("layer", "rms")
NORM_POSITIONS = ("pre", "post", "pre_post")
MLPS = ("gelu", "gelu_tanh", "relu", "silu", "swiglu", "geglu_tanh", "swiglu_clamped")
POSITIONS = ("none", "rope", "alibi")
QK_NORMS = ("none", "head", "proj")


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
class MoEConfig:
    """The sparse mixture-of-experts MLP of blocks/moe.py (router options: ops/moe_router.py)."""
    n_experts: int                  # E, routed experts (SwiGLU MLPs)
    experts_per_token: int          # k, experts each token is sent to
    expert_d_ff: int                # F_e, one expert's hidden width
    scoring: str = "softmax"        # router scores: "softmax" or "sigmoid" (DeepSeek-V3)
    norm_topk_prob: bool = False    # divide the k chosen scores by their sum
    routed_scaling_factor: float = 1.0  # multiplies the chosen weights (DeepSeek-V3)
    n_group: int = 1                # expert groups for group-limited routing (DeepSeek-V3)
    topk_group: int = 1             # groups kept per token
    router_bias: bool = False       # e_score_correction_bias (E,): chooses, never weighs
    shared_d_ff: int = 0            # hidden width of the always-on shared expert (0: none)
    shared_gate: bool = False       # sigmoid gate on the shared expert (Qwen2-MoE)
    dense_layers: tuple[int, ...] = ()  # layers that keep a dense MLP (DeepSeek's first k)
    router_logit_bias: bool = False # a bias added to the router logits, trained (gpt-oss)
    expert_mlp: str = "swiglu"      # each expert's MLP: "swiglu" or "swiglu_clamped" (gpt-oss)
    expert_bias: bool = False       # biases on the experts' gate, up and down (gpt-oss)

    def __post_init__(self):
        e, k = self.n_experts, self.experts_per_token
        if e < 1 or not 1 <= k <= e:
            raise GlassformerError(f"experts_per_token={k} must be between 1 and "
                                   f"n_experts={e} (n_experts at least 1)")
        if self.expert_d_ff < 1 or self.shared_d_ff < 0:
            raise GlassformerError(f"expert_d_ff must be at least 1 and shared_d_ff at least 0, "
                                   f"got {self.expert_d_ff} and {self.shared_d_ff}")
        check_choice("scoring", self.scoring, SCORINGS)
        if self.n_group < 1 or e % self.n_group or not 1 <= self.topk_group <= self.n_group:
            raise GlassformerError(f"n_group={self.n_group} must divide n_experts={e} and "
                                   f"topk_group={self.topk_group} be between 1 and n_group")
        if self.topk_group * (e // self.n_group) < k:
            raise GlassformerError(f"topk_group={self.topk_group} groups of {e // self.n_group} "
                                   f"experts hold fewer than experts_per_token={k}")
        if self.shared_gate and not self.shared_d_ff:
            raise GlassformerError("shared_gate needs a shared expert (shared_d_ff >= 1)")

    def sparse_at(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) has the MoE MLP rather than a dense one."""
        return layer not in self.dense_layers


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
    moe: MoEConfig | None = None    # sparse mixture-of-experts MLP (None: the dense one)
    qk_norm: str = "none"           # RMSNorm on q and k before RoPE: "head" (each head's D,
                                    # Qwen3) or "proj" (the whole projection, OLMoE)
    norm_offset: float = 0.0        # RMSNorm scales by (offset + w): Gemma's (1 + w), w from 0
    window: int | None = None       # W: causal attention sees the W newest keys (None: all)
    full_layers: tuple[int, ...] = ()   # layers that keep full attention despite `window`
    local_rope_theta: float | None = None  # RoPE base of the windowed layers, unscaled
                                           # (Gemma 3's rope_local_base_freq; None: rope_theta)
    attn_scale: float | None = None  # score scale (None: 1/sqrt(D)); Gemma: query_pre_attn^-0.5
    attn_softcap: float | None = None  # cap * tanh(scores / cap) (Gemma's attn softcapping)
    attn_sinks: bool = False        # one learned sink logit per head, `attn.sinks` (H,)
    glu_alpha: float = 1.702        # swiglu_clamped: out = (clip(up) + 1) g sigmoid(alpha g)
    glu_limit: float = 7.0          # swiglu_clamped: g = min(gate, limit), up clipped to +-limit

    def __post_init__(self):
        for name, value, allowed in (("norm", self.norm, NORMS),
                                     ("norm_position", self.norm_position, NORM_POSITIONS),
                                     ("mlp", self.mlp, MLPS),
                                     ("position", self.position, POSITIONS),
                                     ("qk_norm", self.qk_norm, QK_NORMS)):
            check_choice(name, value, allowed)
        if self.head_dim is None and self.d_model % self.n_head:
            raise GlassformerError(f"n_head={self.n_head} must divide d_model={self.d_model}")
        if self.kv_heads < 1 or self.n_head % self.kv_heads:
            raise GlassformerError(f"n_head={self.n_head} must be a multiple of "
                                   f"n_kv_head={self.kv_heads}")
        if self.mla is not None and self.dim_per_head != self.mla.qk_rope_head_dim:
            raise GlassformerError(f"an MLA block's head_dim is its RoPE width "
                                   f"qk_rope_head_dim={self.mla.qk_rope_head_dim}, got "
                                   f"{self.dim_per_head}")
        if self.window is not None and (isinstance(self.window, bool) or self.window < 1):
            raise GlassformerError(f"sliding_window must be at least 1 token, got "
                                   f"{self.window!r}")
        if self.position == "rope" and self.dim_per_head % 2:
            raise GlassformerError(f"RoPE needs an even head dim D, got {self.dim_per_head}")

    def window_at(self, layer: int) -> int | None:
        """The sliding window of layer `layer` (0-based), None where it attends to every key."""
        return None if layer in self.full_layers else self.window

    def rope_at(self, layer: int) -> tuple[float, object]:
        """(RoPE base, scaling) of layer `layer`: a windowed layer of a model with a local base
        rotates by that base, unscaled (Gemma 3); every other by rope_theta and rope_scaling."""
        if self.local_rope_theta is not None and self.window_at(layer) is not None:
            return self.local_rope_theta, None
        return self.rope_theta, self.rope_scaling

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def dim_per_head(self) -> int:
        return self.d_model // self.n_head if self.head_dim is None else self.head_dim

    @property
    def hidden(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff
