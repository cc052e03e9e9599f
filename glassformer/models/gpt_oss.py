"""gpt-oss (OpenAI 2025): the mixture-of-experts LLaMA decoder with attention sinks and windows.

    ids (B, T) -> tok_emb[ids]                                              (B, T, C)
               -> L x pre-norm block (RMSNorm; attention with q/k/v/o biases, YaRN RoPE,
                                      grouped KV heads, one sink logit per head, a sliding window
                                      of W keys in every other layer; RMSNorm; MoE MLP: router
                                      with a bias, top-k of E experts with biases and the
                                      clamped SwiGLU)
               -> norm_f (RMSNorm) -> x @ lm_head                                (B, T, V)

    layer:  0  1  2  3  4  5 ...    (layer_types: sliding, full, sliding, full, ...)
    window: W  -  W  -  W  -

Sinks (ops/sink.py) let a head put weight on "nothing", which matters most in its windowed
layers, where the W keys it can see may hold nothing it wants. The router picks the top k of
its biased logits and softmaxes those k values, which equals the full softmax renormalised over
the chosen k (norm_topk_prob). Each expert computes (clip(x W_up + b_up) + 1) *
g sigmoid(alpha g) with g = min(x W_gate + b_gate, limit), then W_down + b_down
(ops/clamped_swiglu.py).

Everything but the flags is LLaMA's (models/llama.py, through models/moe.py's family_of): the same
forward, backward, init and KV cache (a ring of W positions per windowed layer in generate).
Matches HF `GptOssForCausalLM` (transformers 5.24) when loaded from its weights.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.models.moe import MoeLlamaConfig, family_of


@dataclass(frozen=True)
class GptOssConfig(MoeLlamaConfig):
    """MoeLlamaConfig's fields with gpt-oss's defaults, and its clamped SwiGLU's two numbers."""
    ARCH: ClassVar[str] = "gpt_oss"
    qk_norm: str = "none"           # gpt-oss has no QK-norm
    norm_topk_prob: bool = True     # softmax over the chosen k logits
    qkv_bias: bool = True           # attention_bias: q, k, v and o
    out_bias: bool = True
    glu_alpha: float = 1.702        # swiglu_alpha
    glu_limit: float = 7.0          # swiglu_limit

    def moe_config(self) -> MoEConfig | None:
        moe = super().moe_config()
        if moe is None:
            return None
        return replace(moe, router_logit_bias=True, expert_mlp="swiglu_clamped",
                       expert_bias=True)

    def block_config(self) -> BlockConfig:
        return replace(super().block_config(), attn_sinks=True, glu_alpha=self.glu_alpha,
                       glu_limit=self.glu_limit)


FAMILY = family_of(GptOssConfig)
