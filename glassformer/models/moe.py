"""The LLaMA decoder as 2024-25 models build it: sparse mixture-of-experts MLPs and QK-norm.

    ids (B, T) -> tok_emb[ids]                                              (B, T, C)
               -> L x pre-norm block (RMSNorm, attention with RoPE, grouped KV heads and
                                      QK-norm; RMSNorm, then in a sparse layer the MoE MLP of
                                      blocks/moe.py: router, top-k of E SwiGLU experts, weighted
                                      sum, [shared expert]; in a dense layer LLaMA's SwiGLU)
               -> norm_f (RMSNorm) -> x @ lm_head  (or x @ tok_emb^T when tied)   (B, T, V)

Everything but the flags is LLaMA's (models/llama.py): the same forward, backward, init and
KV cache, since a family differs from LLaMA only in its BlockConfig (`qk_norm`, `moe`). One
config covers these Hugging Face model types (io/hf/moe.py and, for Mixtral's tensor names,
io/hf/mixtral.py with its own arch):

    qwen3       Qwen3ForCausalLM       dense (n_experts=0), QK-norm per head
    qwen3_moe   Qwen3MoeForCausalLM    MoE, QK-norm per head, norm_topk_prob, sparse_step,
                                       extra_dense_layers (its mlp_only_layers)
    olmoe       OlmoeForCausalLM       MoE, QK-norm over the whole q / k projection
    mixtral     MixtralForCausalLM     MoE (always renormalised), no QK-norm (arch "mixtral")

Matches those transformers classes (5.24) when loaded from their weights. Init: LLaMA's (Normal
0.02, the residual-writing projections, attn.wo and each expert's w_down, at 0.02 / sqrt(2 L)),
router Normal(0.02), QK-norm scales 1. Deviations: Mixtral's training-time router jitter is not
implemented (refused when set); the balance losses live beside the model (helper `moeview`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.errors import GlassformerError
from glassformer.models import llama
from glassformer.models.family import CAUSAL, Family, check_config_values


@dataclass(frozen=True)
class MoeLlamaConfig(llama.LlamaConfig):
    """LlamaConfig's fields, and the MoE and QK-norm ones (blocks/config.py: MoEConfig)."""
    ARCH: ClassVar[str] = "moe"
    qk_norm: str = "head"           # "head" (Qwen3), "proj" (OLMoE) or "none" (Mixtral)
    n_experts: int = 8              # E (0: every MLP dense, as Qwen3)
    experts_per_token: int = 2      # k
    expert_d_ff: int | None = None  # F_e, one expert's width (None: the dense d_ff)
    norm_topk_prob: bool = True     # the k chosen weights divided by their sum
    scoring: str = "softmax"        # router scores: "softmax" or "sigmoid"
    routed_scaling_factor: float = 1.0  # multiplies the chosen weights
    n_group: int = 1                # expert groups of group-limited routing
    topk_group: int = 1             # groups kept per token
    router_bias: bool = False       # a selection-only bias per expert (bias-balanced routing)
    shared_d_ff: int = 0            # width of an always-on shared expert (0: none)
    shared_gate: bool = False       # sigmoid gate on the shared expert
    sparse_step: int = 1            # layer i is sparse when (i + 1) % sparse_step == 0
    first_dense_layers: int = 0     # the first layers keep a dense MLP
    extra_dense_layers: tuple[int, ...] = ()  # these layers keep a dense MLP too, whatever
                                              # sparse_step says (Qwen3-MoE's mlp_only_layers)

    def __post_init__(self):
        check_config_values(self)  # types first, so the ranges below compare numbers
        # a list (from JSON) kept as a tuple: configs compare equal however they were read
        object.__setattr__(self, "extra_dense_layers", tuple(int(i) for i in
                                                             self.extra_dense_layers))
        if self.n_experts < 0 or self.sparse_step < 1 or self.first_dense_layers < 0:
            raise GlassformerError(f"n_experts and first_dense_layers must be at least 0 and "
                                   f"sparse_step at least 1, got {self.n_experts}, "
                                   f"{self.first_dense_layers}, {self.sparse_step}")
        outside = [i for i in self.extra_dense_layers if not 0 <= i < self.n_layer]
        if outside:
            raise GlassformerError(f"extra_dense_layers names layer {outside[0]}, but the model "
                                   f"has layers 0 to {self.n_layer - 1}")
        super().__post_init__()  # sizes, and block_config(), which checks the MoE fields

    def dense_layers(self) -> tuple[int, ...]:
        """The layers with a dense MLP: HF Qwen3-MoE's rule (a layer is sparse when
        (i + 1) % sparse_step == 0 and it is not listed in mlp_only_layers), and DeepSeek's
        first k."""
        return tuple(i for i in range(self.n_layer)
                     if i < self.first_dense_layers or (i + 1) % self.sparse_step
                     or i in self.extra_dense_layers)

    def moe_config(self) -> MoEConfig | None:
        """The block's MoEConfig, None without experts (every layer dense)."""
        if self.n_experts == 0:
            return None
        width = self.hidden if self.expert_d_ff is None else self.expert_d_ff
        return MoEConfig(n_experts=self.n_experts, experts_per_token=self.experts_per_token,
                         expert_d_ff=width, scoring=self.scoring,
                         norm_topk_prob=self.norm_topk_prob,
                         routed_scaling_factor=self.routed_scaling_factor,
                         n_group=self.n_group, topk_group=self.topk_group,
                         router_bias=self.router_bias, shared_d_ff=self.shared_d_ff,
                         shared_gate=self.shared_gate, dense_layers=self.dense_layers())

    def block_config(self) -> BlockConfig:
        return replace(super().block_config(), qk_norm=self.qk_norm, moe=self.moe_config())


def family_of(config: type) -> Family:
    """LLaMA's functions under this config class (its ARCH names the family)."""
    return Family(name=config.ARCH, kind=CAUSAL, config=config,
                  init_params=llama.init_params, forward=llama.forward,
                  backward=llama.backward, param_shapes=llama.param_shapes,
                  kv_layout=llama.kv_layout, sliding_context=False,
                  windows=llama.layer_windows)


FAMILY = family_of(MoeLlamaConfig)
