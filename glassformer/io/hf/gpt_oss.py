"""gpt-oss in Hugging Face form (model_type gpt_oss, GptOssForCausalLM): glassformer's arch
"gpt_oss" (models/gpt_oss.py).

Tensor names are LLaMA's for the embeddings, norms and attention (with biases), plus
self_attn.sinks (H,), and under mlp: router.weight / router.bias (E, C) / (E,), and the experts as
three stacked parameters, already (in, out): gate_up_proj (E, C, 2F) with gate and up
*interleaved* on the last axis (gate, up, gate, up, ...), its bias (E, 2F) likewise, down_proj
(E, F, C) and its bias (E, C). The interleaved halves are split apart on load and woven back on
save (records.py: Split with interleaved=True).
"""
from __future__ import annotations

from dataclasses import asdict, replace

from glassformer.io.hf import llama
from glassformer.io.hf.moe import TRAINING_ONLY, llama_keys, moe_fields
from glassformer.io.hf.records import FamilyNames, HFFamily, ModelType, Rename, Split, norm
from glassformer.io.hf.windows import layer_types, window_fields
from glassformer.models.gpt_oss import GptOssConfig

_MLP = "layers.{i}.mlp."
NAMES = FamilyNames(
    prefix="model.",
    outside=("lm_head.",),
    top=llama.NAMES.top,
    layer=(*norm("norm1", "layers.{i}.input_layernorm", bias=False),
           *llama.NAMES.layer[1:9],                          # q, k, v, o weights and biases
           Rename("attn.sinks", "layers.{i}.self_attn.sinks", False),
           *norm("norm2", "layers.{i}.post_attention_layernorm", bias=False),
           Rename("mlp.router", _MLP + "router.weight", True),                    # (C, E)
           Rename("mlp.b_router", _MLP + "router.bias", False),                   # (E,)
           Split(("mlp.experts.w_gate", "mlp.experts.w_up"), _MLP + "experts.gate_up_proj",
                 interleaved=True),                                               # (E, C, F) x2
           Split(("mlp.experts.b_gate", "mlp.experts.b_up"),
                 _MLP + "experts.gate_up_proj_bias", interleaved=True),          # (E, F) x2
           Rename("mlp.experts.w_down", _MLP + "experts.down_proj", False),       # (E, F, C)
           Rename("mlp.experts.b_down", _MLP + "experts.down_proj_bias", False)),  # (E, C)
    tied=llama.NAMES.tied,
    ignored=llama.NAMES.ignored)


def from_hf(hf: dict) -> GptOssConfig:
    """config.json of model_type gpt_oss -> GptOssConfig (LLaMA's fields as io/hf/llama.py reads
    them, YaRN included; windows by layer_types; intermediate_size is each expert's width)."""
    base = asdict(llama.from_hf(hf))
    base.update(window_fields(hf))
    return GptOssConfig(**base, **moe_fields(hf, "num_local_experts"),
                        glu_alpha=float(hf.get("swiglu_alpha", 1.702)),
                        glu_limit=float(hf.get("swiglu_limit", 7.0)))


GPT_OSS = ModelType(
    "gpt_oss", "gpt_oss", "GptOssForCausalLM",
    llama.READS | TRAINING_ONLY | {"sliding_window", "layer_types", "num_local_experts",
                                   "num_experts_per_tok", "swiglu_alpha", "swiglu_limit"},
    required={"hidden_act": ("silu",)},
    from_hf=from_hf)


def to_hf(cfg: GptOssConfig) -> dict:
    """The config.json of the GptOssForCausalLM that computes this model."""
    hf = llama_keys(replace(cfg, sliding_window=None, full_layers=()))  # windows: below
    return {"architectures": [GPT_OSS.hf_class], "model_type": GPT_OSS.name, **hf,
            "intermediate_size": cfg.moe_config().expert_d_ff,
            "num_local_experts": cfg.n_experts, "num_experts_per_tok": cfg.experts_per_token,
            "sliding_window": cfg.sliding_window or cfg.max_seq_len,
            "layer_types": layer_types(cfg), "swiglu_alpha": cfg.glu_alpha,
            "swiglu_limit": cfg.glu_limit}


FAMILY = HFFamily("gpt_oss", (GPT_OSS,), to_hf, NAMES)
