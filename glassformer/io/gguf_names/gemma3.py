"""Gemma 3 text (general.architecture gemma3) in llama.cpp's GGUF names.

convert_hf_to_gguf.py renames Gemma 3's tensors and adds 1 to every RMSNorm weight (HF stores w,
the gain is 1 + w; GGUF stores the gain): the four norms of a layer, q_norm, k_norm and the
final norm. q and k rows are not permuted (llama.cpp turns Gemma's heads in NeoX halves, as HF).

    input_layernorm             attn_norm            post_attention_layernorm   post_attention_norm
    pre_feedforward_layernorm   ffn_norm             post_feedforward_layernorm post_ffw_norm
    self_attn.q_norm / k_norm   attn_q_norm / _k_norm

Metadata, and what llama.cpp leaves implicit:
- gemma3.attention.sliding_window is W; which layers slide is not written by older converters:
  llama.cpp's Gemma 3 slides five layers of six (layer i is global when (i + 1) % 6 == 0).
  A gemma3.attention.sliding_window_pattern key, when present, overrides it (a period, or one
  flag per layer, true = sliding).
- rope.freq_base is the global layers' base; the local layers' is rope.freq_base_swa (10 000
  when absent). Global RoPE scaling is rope.scaling.type / .factor (linear in Gemma 3 4B+).
- query_pre_attn_scalar: llama.cpp scales scores by 1/sqrt(head_dim) (key_length), or by
  1/sqrt(C / H) for the 62-layer 27B; a file with gemma3.attention.scale (s) means
  query_pre_attn_scalar = 1/s^2, and that key is written for a model whose scalar is not its
  head width.
- the embedding's sqrt(C) scale is computed, not stored, on both sides.
"""
from __future__ import annotations

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.gguf_names.records import GGUFArch, plus_one, rename, shared_metadata

_NORMS = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
          "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}
_LINEARS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
PATTERN = 6   # llama.cpp's Gemma 3: every 6th layer global


def rows(hf: dict) -> list:
    out = [rename("token_embd.weight", "embed_tokens.weight", "the token embedding"),
           rename("output.weight", "lm_head.weight", "the LM head"),
           plus_one("output_norm.weight", "norm.weight", "the final RMSNorm gain")]
    for i in range(hf["num_hidden_layers"]):
        out += [plus_one(f"blk.{i}.{ours}.weight", f"layers.{i}.{theirs}.weight",
                         f"the {theirs} gain") for ours, theirs in _NORMS.items()]
        out += [plus_one(f"blk.{i}.attn_{x}_norm.weight", f"layers.{i}.self_attn.{x}_norm.weight",
                         f"{x}'s RMSNorm gain") for x in "qk"]
        out += [rename(f"blk.{i}.{ours}.weight", f"layers.{i}.{theirs}.weight", theirs)
                for ours, theirs in _LINEARS.items()]
    return out


def _sliding(meta, n_layer: int) -> list[bool]:
    """Which layers slide: sliding_window_pattern (a period or per-layer flags), else 5 of 6."""
    pattern = meta.get("attention.sliding_window_pattern", "", default=PATTERN)
    if isinstance(pattern, list):
        if len(pattern) != n_layer:
            raise CheckpointError(f"{meta.path}: gemma3.attention.sliding_window_pattern has "
                                  f"{len(pattern)} flags, expected one per layer ({n_layer})")
        return [bool(flag) for flag in pattern]
    period = int(pattern)
    return [period <= 0 or (i + 1) % period != 0 for i in range(n_layer)]


def _scalar(scale: float) -> float:
    """query_pre_attn_scalar from the score scale 1/sqrt(s) (a FLOAT32 key: 12.0000004 -> 12)."""
    scalar = scale ** -2
    return float(round(scalar)) if abs(scalar - round(scalar)) < 1e-4 * scalar else scalar


def hf_config(meta, shapes: dict) -> dict:
    """The file's gemma3.* keys -> the config.json io/hf/gemma3.py reads."""
    d_model = meta.int("embedding_length", "the model width C")
    n_head = meta.int("attention.head_count", "the query heads")
    n_layer = meta.layers()
    head_dim = meta.int("attention.key_length", "the head width",
                        default=d_model // max(n_head, 1))
    full_rope = {"rope_type": "default",
                 "rope_theta": meta.float("rope.freq_base", "the global layers' RoPE base",
                                          default=1_000_000.0)}
    scaling = meta.get("rope.scaling.type", "the RoPE scaling", default="none")
    if scaling == "linear":
        full_rope.update(rope_type="linear",
                         factor=meta.float("rope.scaling.factor", "the linear RoPE factor"))
    elif scaling != "none":
        raise CheckpointError(f"{meta.path}: gemma3.rope.scaling.type is {scaling!r}; Gemma 3 "
                              "GGUF files use none or linear")
    # llama.cpp's own rule when the key is absent: Gemma 3 27B (62 layers) scales by
    # (C / H)^-1/2 (its query_pre_attn_scalar 168 = 5376 / 32), the others by head_dim^-1/2
    implied = d_model // max(n_head, 1) if n_layer == 62 else head_dim
    scale = meta.float("attention.scale", "the score scale", default=implied ** -0.5)
    window = meta.int("attention.sliding_window", "the local layers' window W", default=0)
    slides = _sliding(meta, n_layer) if window else [False] * n_layer
    return {"model_type": "gemma3_text", "num_hidden_layers": n_layer, "hidden_size": d_model,
            "vocab_size": meta.int("vocab_size", "the vocabulary size",
                                   default=shapes["token_embd.weight"][0]),
            "intermediate_size": meta.int("feed_forward_length", "the GeGLU width F"),
            "num_attention_heads": n_head,
            "num_key_value_heads": meta.int("attention.head_count_kv", "the key/value heads"),
            "head_dim": head_dim,
            "max_position_embeddings": meta.int("context_length", "the context length"),
            "rms_norm_eps": meta.float("attention.layer_norm_rms_epsilon", "the RMSNorm eps"),
            "rope_parameters": {"full_attention": full_rope, "sliding_attention": {
                "rope_type": "default",
                "rope_theta": meta.float("rope.freq_base_swa", "the local layers' RoPE base",
                                         default=10_000.0)}},
            "sliding_window": window or meta.int("context_length", "the context length"),
            "layer_types": ["sliding_attention" if s else "full_attention" for s in slides],
            "query_pre_attn_scalar": _scalar(scale),
            "final_logit_softcapping": meta.get("final_logit_softcapping", "the logits' cap",
                                                default=None),
            "attn_logit_softcapping": None, "hidden_activation": "gelu_pytorch_tanh",
            "tie_word_embeddings": "output.weight" not in shapes}


def metadata(hf: dict) -> dict:
    """config.json -> the gemma3.* keys (convert_hf_to_gguf.py's, plus the layer pattern and the
    local RoPE base, which llama.cpp would otherwise assume)."""
    rope = hf["rope_parameters"]
    full, local = rope["full_attention"], rope["sliding_attention"]
    out = {**shared_metadata(hf),
           "rope.freq_base": float(full["rope_theta"]),
           "rope.freq_base_swa": float(local["rope_theta"]),
           "attention.sliding_window": hf["sliding_window"],
           "attention.sliding_window_pattern": [kind == "sliding_attention"
                                                for kind in hf["layer_types"]]}
    kind = full.get("rope_type", "default")
    if kind == "linear":
        out.update({"rope.scaling.type": "linear", "rope.scaling.factor": float(full["factor"])})
    elif kind != "default":
        raise GlassformerError(f"Gemma 3's global RoPE is {kind!r}; its GGUF form has none or "
                               "linear scaling")
    if hf["query_pre_attn_scalar"] != hf["head_dim"]:
        out["attention.scale"] = float(hf["query_pre_attn_scalar"]) ** -0.5
    if hf.get("final_logit_softcapping") is not None:
        out["final_logit_softcapping"] = float(hf["final_logit_softcapping"])
    return out


GEMMA3 = GGUFArch("gemma3", "gemma3", "gemma3_text", hf_config, metadata, rows)
