"""RoPE scaling in config.json <-> LlamaConfig's rope_* fields (LLaMA, Qwen2, Mistral).

transformers 4.x writes `rope_scaling` beside a top-level `rope_theta`; 5.x writes
`rope_parameters` holding both. Each kind (`rope_type`) has its keys (`ROPE_KEYS`); a key a kind
does not have is an error. Defaults and derived values are transformers' (standardize_rope_params
and the _compute_*_parameters functions); the math is ops/rope_scaling.py's.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.models.llama import LlamaConfig
from glassformer.ops.rope_scaling import yarn_mscale

# The keys of each RoPE kind in rope_parameters / rope_scaling (besides rope_type and rope_theta).
ROPE_KEYS = {"default": frozenset(), "linear": frozenset({"factor"}),
             "dynamic": frozenset({"factor"}),
             "llama3": frozenset({"factor", "original_max_position_embeddings",
                                  "low_freq_factor", "high_freq_factor"}),
             "yarn": frozenset({"factor", "original_max_position_embeddings", "attention_factor",
                                "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                                "truncate"})}


def rope_fields_from_hf(hf: dict) -> dict:
    """LlamaConfig's rope_* fields from rope_scaling (transformers 4.x, with a top-level
    rope_theta) or rope_parameters (5.x); rope_scaling wins when both are set, as in
    transformers. Defaults and derived values are transformers' (standardize_rope_params and
    the _compute_*_parameters functions)."""
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    name = "rope_scaling" if hf.get("rope_scaling") else "rope_parameters"
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ROPE_KEYS:
        raise GlassformerError(f"config.json {name} has rope_type {kind!r}; glassformer "
                               f"implements {', '.join(ROPE_KEYS)}")
    extra = sorted(set(rope) - ROPE_KEYS[kind] - {"rope_type", "type", "rope_theta"})
    if extra:
        raise GlassformerError(f"config.json {name} has {extra}, which glassformer's "
                               f"{kind!r} RoPE does not implement")
    fields = {"rope_theta": float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
              "rope_type": kind}
    context = hf["max_position_embeddings"]
    original = int(rope.get("original_max_position_embeddings") or context)
    if kind == "default":
        return fields
    factor = rope.get("factor")
    if factor is None and kind == "yarn":
        factor = context / original  # DeepSeek-V3's convention, as transformers reads it
    if factor is None:
        raise GlassformerError(f"config.json {name} asks for {kind} RoPE without a factor")
    fields["rope_factor"] = float(factor)
    if kind == "dynamic":  # max_position_embeddings is where NTK scaling starts
        fields["rope_original_max_seq_len"] = context
    if kind == "llama3":
        missing = sorted({"factor", "low_freq_factor", "high_freq_factor"} - set(rope))
        if missing:
            raise GlassformerError(f"config.json {name} asks for llama3 RoPE without {missing}")
        fields.update(rope_original_max_seq_len=original,
                      rope_low_freq_factor=float(rope["low_freq_factor"]),
                      rope_high_freq_factor=float(rope["high_freq_factor"]))
    if kind == "yarn":
        fields.update(rope_original_max_seq_len=original,
                      rope_beta_fast=float(rope.get("beta_fast") or 32.0),
                      rope_beta_slow=float(rope.get("beta_slow") or 1.0),
                      rope_attention_factor=_yarn_attention_factor(rope, fields["rope_factor"]),
                      rope_truncate=bool(rope.get("truncate", True)))
    return fields


def _yarn_attention_factor(rope: dict, factor: float) -> float | None:
    """attention_factor as given, or from DeepSeek's mscale pair, or None (from factor)."""
    if rope.get("attention_factor") is not None:
        return float(rope["attention_factor"])
    mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    return None


def rope_parameters_to_hf(cfg: LlamaConfig) -> dict:
    """The rope_parameters dict transformers 5 reads (4.x reads the same as rope_scaling)."""
    params = {"rope_type": cfg.rope_type, "rope_theta": cfg.rope_theta}
    if cfg.rope_type == "default":
        return params
    params["factor"] = cfg.rope_factor
    if cfg.rope_type == "llama3":
        params.update(original_max_position_embeddings=cfg.rope_original_max_seq_len,
                      low_freq_factor=cfg.rope_low_freq_factor,
                      high_freq_factor=cfg.rope_high_freq_factor)
    if cfg.rope_type == "yarn":
        params.update(original_max_position_embeddings=cfg.rope_original_max_seq_len,
                      beta_fast=cfg.rope_beta_fast, beta_slow=cfg.rope_beta_slow,
                      truncate=cfg.rope_truncate)
        if cfg.rope_attention_factor is not None:
            params["attention_factor"] = cfg.rope_attention_factor
    return params
