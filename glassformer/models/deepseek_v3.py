"""DeepSeek-V3 (DeepSeek-AI 2024, arXiv 2412.19437): LLaMA's decoder with multi-head latent
attention.

    ids (B, T) -> tok_emb[ids]                                              (B, T, C)
               -> L x pre-norm block (RMSNorm, MLA with decoupled RoPE: blocks/mla.py,
                                      RMSNorm, SwiGLU MLP)
               -> norm_f (RMSNorm) -> x @ lm_head  (or x @ tok_emb^T when tied)   (B, T, V)

Only the block differs from LLaMA (models/llama.py), by a flag on BlockConfig (`mla`), so the
model's functions are llama's: the same embedding, layer stack, head and backward, composed in
models/common.py. Its generation cache is the latent one: per token and layer the normalised
latent (R) and the rotated RoPE key (Dr), not H keys and values (`kv_layout` returns
KVLayout(heads=1, key_dim=R, value_dim=Dr); blocks/kv_cache.py).

Layers from first_k_dense_replace on replace the dense MLP by DeepSeek-V3's mixture of experts
(blocks/moe.py, a flag on BlockConfig too: `moe`): E routed SwiGLU experts chosen k per token
by sigmoid scores, group-limited (n_group, topk_group), the choice shifted by the selection-only
bias e_score_correction_bias ("router_bias"), the k weights renormalised and scaled by
routed_scaling_factor, plus the always-on shared experts.

Matches HF `DeepseekV3ForCausalLM`: the MLA of transformers' DeepseekV3Attention
(rope_interleave, YaRN with DeepSeek's softmax mscale), DeepseekV3MoE, RMSNorm with eps inside
the square root, SiLU-gated MLPs. Multi-token prediction modules are not built (transformers
neither). The balance losses and the bias update are training's (train --arch moe).
Init: llama's (Normal(0, 0.02); attn.wo and mlp.w_down at 0.02 / sqrt(2 L); norm scales 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from glassformer.blocks.config import BlockConfig, MLAConfig, MoEConfig
from glassformer.blocks.kv_cache import KVLayout
from glassformer.blocks.mla import latent_layout
from glassformer.errors import GlassformerError
from glassformer.models import llama
from glassformer.models.family import CAUSAL, Family, check_config_values, check_sizes


@dataclass(frozen=True)
class DeepseekV3Config(llama.LlamaConfig):
    """LlamaConfig's fields (n_kv_head, head_dim and the biases stay unset: MLA has its own
    widths), and the MLA and MoE ones."""
    ARCH: ClassVar[str] = "deepseek_v3"
    # multi-head latent attention (blocks/mla.py):
    q_lora_rank: int | None = None  # Rq, the queries' low rank (None: a plain q projection)
    kv_lora_rank: int = 32          # R, the latent cached per token and layer
    qk_nope_head_dim: int = 32      # Dn, query/key width without RoPE, per head
    qk_rope_head_dim: int = 16      # Dr, the RoPE part (one key shared by all heads)
    v_head_dim: int = 32            # Dv, value width per head
    rope_interleave: bool = True    # RoPE pairs dims (2i, 2i+1), as DeepSeek's checkpoints
    rope_mscale_all_dim: float = 0.0  # yarn: softmax scale times mscale(factor, this)^2 (0: no)
    # the sparse mixture of experts (blocks/moe.py) of every layer from first_k_dense_replace on:
    n_experts: int = 0              # E, routed experts (0: every layer keeps the dense MLP)
    experts_per_token: int = 1      # k, experts each token is sent to
    expert_d_ff: int = 1            # F_e, an expert's SwiGLU width (moe_intermediate_size)
    n_shared_experts: int = 1       # always-on shared experts, one SwiGLU of width n F_e
    first_k_dense_replace: int = 0  # the first layers keep the dense MLP
    n_group: int = 1                # expert groups; a token's experts come from topk_group of
    topk_group: int = 1             # them, ranked by each group's two best scores
    norm_topk_prob: bool = True     # the k chosen sigmoid scores divided by their sum
    routed_scaling_factor: float = 1.0  # then multiplied by this

    def __post_init__(self):
        check_config_values(self)  # types first: no inf, no 2.0 layers, no True heads
        check_sizes(self)
        # n_kv_head may say n_head: MLA makes one key and value per head
        for name, unset in (("n_kv_head", (None, self.n_head)), ("head_dim", (None,)),
                            ("qkv_bias", (False,)), ("out_bias", (False,))):
            if getattr(self, name) not in unset:
                raise GlassformerError(f"{name} does not apply to DeepSeek-V3's latent attention "
                                       f"(its widths: kv_lora_rank, qk_nope_head_dim, "
                                       f"qk_rope_head_dim, v_head_dim), got {getattr(self, name)!r}")
        if self.n_experts < 0 or self.n_shared_experts < 0 or self.first_k_dense_replace < 0:
            raise GlassformerError("n_experts, n_shared_experts and first_k_dense_replace must "
                                   f"be at least 0, got {self.n_experts}, "
                                   f"{self.n_shared_experts} and {self.first_k_dense_replace}")
        self.block_config()  # validates the MLA and MoE settings, the even RoPE width, dropout

    def mla(self) -> MLAConfig:
        return MLAConfig(kv_lora_rank=self.kv_lora_rank, qk_nope_head_dim=self.qk_nope_head_dim,
                         qk_rope_head_dim=self.qk_rope_head_dim, v_head_dim=self.v_head_dim,
                         q_lora_rank=self.q_lora_rank, rope_interleave=self.rope_interleave,
                         mscale_all_dim=self.rope_mscale_all_dim)

    def block_config(self) -> BlockConfig:
        # head_dim is the RoPE width Dr, as in HF's DeepseekV3Config: the model's shared RoPE
        # tables (models/common.py: layers_forward) are made for it
        return BlockConfig(d_model=self.d_model, n_head=self.n_head, d_ff=self.hidden,
                           head_dim=self.qk_rope_head_dim, norm="rms", norm_eps=self.norm_eps,
                           norm_bias=False, norm_position="pre", mlp="swiglu", qkv_bias=False,
                           out_bias=False, mlp_bias=False, position="rope",
                           rope_theta=self.rope_theta, rope_scaling=self.rope_scaling(),
                           dropout=self.dropout, mla=self.mla(), moe=self.moe())

    def moe(self) -> MoEConfig | None:
        """DeepSeek-V3's router (sigmoid scores, group-limited choice, the selection-only bias
        e_score_correction_bias) and shared experts; None when no layer is sparse."""
        if self.n_experts == 0 or self.first_k_dense_replace >= self.n_layer:
            return None
        return MoEConfig(n_experts=self.n_experts, experts_per_token=self.experts_per_token,
                         expert_d_ff=self.expert_d_ff, scoring="sigmoid",
                         norm_topk_prob=self.norm_topk_prob,
                         routed_scaling_factor=self.routed_scaling_factor, n_group=self.n_group,
                         topk_group=self.topk_group, router_bias=True,
                         shared_d_ff=self.n_shared_experts * self.expert_d_ff,
                         dense_layers=tuple(range(self.first_k_dense_replace)))

def kv_layout(cfg: DeepseekV3Config) -> KVLayout:
    """The latent cache: one latent (R) in `k` and one RoPE key (Dr) in `v` per token and
    layer, shared by every head."""
    return latent_layout(cfg.mla())          # KVLayout(heads=1, key_dim=R, value_dim=Dr)


# RoPE positions are not learned: generation stops at the context, as LLaMA's.
FAMILY = Family(name="deepseek_v3", kind=CAUSAL, config=DeepseekV3Config,
                init_params=llama.init_params, forward=llama.forward, backward=llama.backward,
                param_shapes=llama.param_shapes, kv_layout=kv_layout, sliding_context=False)
