"""Mixtral in Hugging Face form (model_type mixtral, MixtralForCausalLM): glassformer's arch
"mixtral" (models/mixtral.py), the MoE decoder of models/moe.py without QK-norm.

Its MoE tensors sit under block_sparse_moe, and each expert names its linears w1 (gate), w3 (up)
and w2 (down); otherwise the table is io/hf/moe.py's. Mixtral may slide an attention window in
every layer, applied as Mistral's (io/hf/llama.py, io/hf/windows.py).
"""
from __future__ import annotations

from dataclasses import asdict

from glassformer.errors import GlassformerError
from glassformer.io.hf import llama
from glassformer.io.hf.moe import (TRAINING_ONLY, check_plain_routing, llama_keys, moe_fields,
                                   moe_names)
from glassformer.io.hf.records import HFFamily, ModelType
from glassformer.models.mixtral import MixtralConfig

NAMES = moe_names("block_sparse_moe", {"w_gate": "w1", "w_up": "w3", "w_down": "w2"})


def from_hf(hf: dict) -> MixtralConfig:
    """config.json of model_type mixtral -> MixtralConfig (LLaMA's fields as io/hf/llama.py
    reads them, with Mistral's sliding-window rule; intermediate_size is each expert's width)."""
    base = asdict(llama.from_hf(hf, window_by_default=True))
    return MixtralConfig(**base, **moe_fields(hf, "num_local_experts"))


MIXTRAL = ModelType(
    "mixtral", "mixtral", "MixtralForCausalLM",
    llama.READS | TRAINING_ONLY | {"sliding_window", "layer_types", "num_local_experts",
                                   "num_experts_per_tok"},
    # router jitter multiplies the MoE input by noise while training; glassformer has none
    required={"hidden_act": ("silu",), "router_jitter_noise": (0, 0.0),
              "attention_bias": (False,)},
    from_hf=from_hf)


def to_hf(cfg: MixtralConfig) -> dict:
    """The config.json of the MixtralForCausalLM that computes this model."""
    mixtral_like = (cfg.qk_norm == "none" and cfg.n_experts > 0 and cfg.norm_topk_prob
                    and cfg.sparse_step == 1 and not cfg.extra_dense_layers
                    and not (cfg.qkv_bias or cfg.out_bias))
    if not mixtral_like:
        raise GlassformerError("a Mixtral folder has no QK-norm, no attention biases, experts "
                               "in every layer and always renormalised weights (norm_topk_prob)")
    check_plain_routing(cfg, MIXTRAL)
    hf = llama_keys(cfg)
    hf.pop("attention_bias")
    return {"architectures": [MIXTRAL.hf_class], "model_type": MIXTRAL.name, **hf,
            "intermediate_size": cfg.moe_config().expert_d_ff,
            "sliding_window": cfg.sliding_window,
            "num_local_experts": cfg.n_experts, "num_experts_per_tok": cfg.experts_per_token,
            "router_jitter_noise": 0.0}


FAMILY = HFFamily("mixtral", (MIXTRAL,), to_hf, NAMES)
