"""Gemma 3 text in Hugging Face form (model_type gemma3_text, Gemma3ForCausalLM): glassformer's
arch "gemma3" (models/gemma3.py).

Tensor names are LLaMA's with Gemma's four norms a layer (input_layernorm, post_attention_
layernorm, pre_feedforward_layernorm, post_feedforward_layernorm: our norm1, norm1_post, norm2,
norm2_post) and per-head q_norm / k_norm. Gemma's RMSNorm weights are stored as HF stores them
(w, the gain being 1 + w), so no value changes on the way in or out.

RoPE: transformers 5 writes rope_parameters per layer kind, {"full_attention": {...},
"sliding_attention": {...}}; 4.x wrote rope_theta, rope_local_base_freq and rope_scaling (the
global layers'). The local layers' RoPE is plain (rope_type default) in every Gemma 3.
"""
from __future__ import annotations

from dataclasses import asdict, replace

from glassformer.errors import GlassformerError
from glassformer.io.hf import llama
from glassformer.io.hf.records import FamilyNames, HFFamily, ModelType, Rename, norm
from glassformer.io.hf.rope import rope_parameters_to_hf
from glassformer.io.hf.windows import layer_types, window_fields
from glassformer.models.gemma3 import Gemma3Config

NAMES = FamilyNames(
    prefix="model.",
    outside=("lm_head.",),
    top=llama.NAMES.top,
    layer=(*norm("norm1", "layers.{i}.input_layernorm", bias=False),
           *llama.NAMES.layer[1:9],                          # q, k, v, o weights and biases
           Rename("attn.q_norm", "layers.{i}.self_attn.q_norm.weight", False),
           Rename("attn.k_norm", "layers.{i}.self_attn.k_norm.weight", False),
           *norm("norm1_post", "layers.{i}.post_attention_layernorm", bias=False),
           *norm("norm2", "layers.{i}.pre_feedforward_layernorm", bias=False),
           *norm("norm2_post", "layers.{i}.post_feedforward_layernorm", bias=False),
           Rename("mlp.w_gate", "layers.{i}.mlp.gate_proj.weight", True),
           Rename("mlp.w_up", "layers.{i}.mlp.up_proj.weight", True),
           Rename("mlp.w_down", "layers.{i}.mlp.down_proj.weight", True)),
    tied=llama.NAMES.tied,
    ignored=llama.NAMES.ignored)

READS = llama.READS | frozenset({
    "query_pre_attn_scalar", "sliding_window", "layer_types", "rope_local_base_freq",
    "final_logit_softcapping", "sliding_window_pattern",
    "_sliding_window_pattern",     # layer_types, when present, already says which layers slide
    "hidden_activation"})


def _rope_kinds(hf: dict) -> tuple[dict, float]:
    """(the global layers' RoPE as a flat rope_parameters, the local layers' base)."""
    params = hf.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:
        full = dict(params.get("full_attention") or {})
        local = dict(params.get("sliding_attention") or {})
    else:   # transformers 4.x: global scaling in rope_scaling, bases beside it
        full = dict(hf.get("rope_scaling") or {})
        full.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
        local = {"rope_theta": hf.get("rope_local_base_freq", 10_000.0)}
    full.setdefault("rope_theta", 1_000_000.0)
    if local.get("rope_type", "default") != "default":
        raise GlassformerError("config.json rope_parameters.sliding_attention has rope_type "
                               f"{local['rope_type']!r}; Gemma 3's local layers use plain RoPE")
    return full, float(local.get("rope_theta", 10_000.0))


def from_hf(hf: dict) -> Gemma3Config:
    """config.json of model_type gemma3_text -> Gemma3Config."""
    full, local_theta = _rope_kinds(hf)
    flat = {k: v for k, v in hf.items() if k not in ("rope_scaling", "rope_theta")}
    base = asdict(llama.from_hf({**flat, "rope_parameters": full}))
    base.update(window_fields(hf),
                tie_embeddings=bool(hf.get("tie_word_embeddings", True)))
    return Gemma3Config(**base, local_rope_theta=local_theta,
                        query_pre_attn_scalar=float(hf.get("query_pre_attn_scalar", 256)),
                        final_softcap=hf.get("final_logit_softcapping"))


GEMMA3 = ModelType(
    "gemma3_text", "gemma3", "Gemma3ForCausalLM", READS,
    # transformers 5.24's Gemma3Attention stores attn_logit_softcapping but never applies it:
    # a set value would mean different numbers here and there, so only null loads
    required={"hidden_activation": ("gelu_pytorch_tanh",), "hidden_act": ("gelu_pytorch_tanh",),
              "attn_logit_softcapping": (None,),
              "use_bidirectional_attention": (False, None), "mlp_bias": (False,)},
    from_hf=from_hf)


def to_hf(cfg: Gemma3Config) -> dict:
    """The config.json of the Gemma3ForCausalLM that computes this model."""
    if cfg.attn_softcap is not None:
        raise GlassformerError("Gemma3ForCausalLM (transformers 5.24) does not apply "
                               "attn_logit_softcapping; a model with attn_softcap has no "
                               "Hugging Face form")
    if cfg.qkv_bias != cfg.out_bias:
        raise GlassformerError("Gemma 3 has biases on all four attention projections or none "
                               "(qkv_bias == out_bias)")
    # LLaMA's keys for the shared fields (its windows are written below, as Gemma's)
    hf = llama.to_hf(replace(cfg, sliding_window=None, full_layers=()))
    for key in ("architectures", "model_type", "rope_theta", "rope_scaling", "rope_parameters",
                "hidden_act", "mlp_bias"):
        hf.pop(key, None)
    scalar = cfg.query_pre_attn_scalar
    return {"architectures": [GEMMA3.hf_class], "model_type": GEMMA3.name, **hf,
            "hidden_activation": "gelu_pytorch_tanh",
            "rope_parameters": {"full_attention": rope_parameters_to_hf(cfg),
                                "sliding_attention": {"rope_type": "default",
                                                      "rope_theta": cfg.local_rope_theta}},
            "query_pre_attn_scalar": int(scalar) if scalar == int(scalar) else scalar,
            # every layer full: HF still builds a windowed mask, so it needs some window
            "sliding_window": cfg.sliding_window or cfg.max_seq_len,
            "layer_types": layer_types(cfg),
            "attn_logit_softcapping": None,
            "final_logit_softcapping": cfg.final_softcap,
            "use_bidirectional_attention": False}


FAMILY = HFFamily("gemma3", (GEMMA3,), to_hf, NAMES)
