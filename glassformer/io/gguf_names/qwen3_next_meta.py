"""Qwen3-Next (qwen3next) and Qwen3.5 (qwen35) GGUF metadata <-> config.json, and their records.

llama.cpp keeps the hybrid's shape in {arch}.ssm.* (conv_kernel = W, state_size = Dk,
group_count = Hk, time_step_rank = Hv, inner_size = Hv Dv) and the layer pattern in
full_attention_interval (layer i is full when (i + 1) % interval == 0), so a config whose
layer_types break that rhythm has no GGUF form. Partial RoPE is rope.dimension_count; Qwen3.5
adds rope.dimension_sections for its multimodal RoPE, the same numbers as plain RoPE for text
when every rotary pair sits on a position axis. The tensor rows are io/gguf_names/qwen3_next.py's.
"""
from __future__ import annotations

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.gguf_names.qwen3_next import rows
from glassformer.io.gguf_names.records import GGUFArch, shared_metadata


def _interval(hf: dict) -> int:
    """llama.cpp's full_attention_interval K for config.json's layer_types: layer i is full
    attention exactly when (i + 1) % K == 0. Other patterns have no GGUF form."""
    n_layer, types = hf["num_hidden_layers"], hf["layer_types"]
    full = [i for i, kind in enumerate(types) if kind == "full_attention"]
    every = full[0] + 1 if full else n_layer + 1
    if full != [i for i in range(n_layer) if (i + 1) % every == 0]:
        raise GlassformerError(f"layer_types has full attention at layers {full}; llama.cpp's "
                               "GGUF keeps only full_attention_interval (every K-th layer full), "
                               "so this pattern has no GGUF form")
    return every


def _sections(rope_dims: int) -> list[int]:
    """rope.dimension_sections for Qwen3.5's interleaved multimodal RoPE ([11, 11, 10, 0] at 64
    dims). llama.cpp gives rotary pair j to axis j % 3 while j < 3 x that axis' section, else
    to a fourth axis; for text the three axes hold the same position, so the sections only have
    to cover every pair: ceil((pairs - k) / 3) for axis k."""
    pairs = rope_dims // 2
    return [-(-(pairs - k) // 3) for k in range(3)] + [0]


def _check_sections(meta, rope_dims: int) -> None:
    """A Qwen3.5 file whose sections leave a rotary pair on the fourth axis turns it by another
    position than glassformer's text RoPE: refused."""
    sections = meta.get("rope.dimension_sections", "the multimodal RoPE sections",
                        default=_sections(rope_dims))
    pairs = rope_dims // 2
    uncovered = [j for j in range(pairs) if not j < 3 * int(list(sections)[j % 3])]
    if uncovered:
        raise CheckpointError(f"{meta.path}: {meta.arch}.rope.dimension_sections {sections} "
                              f"leave rotary pairs {uncovered[:4]} of {pairs} to the fourth "
                              "axis; glassformer implements text RoPE (every pair on t, h, w)")


def metadata(hf: dict, *, qwen35: bool) -> dict:
    """config.json -> the {arch}.* keys convert_hf_to_gguf.py writes for it."""
    rope = hf["rope_parameters"]
    rope_dims = int(hf["head_dim"] * rope["partial_rotary_factor"])
    out = {**shared_metadata(hf),
           "rope.freq_base": float(rope["rope_theta"]), "rope.dimension_count": rope_dims,
           "ssm.conv_kernel": hf["linear_conv_kernel_dim"],
           "ssm.state_size": hf["linear_key_head_dim"],
           "ssm.group_count": hf["linear_num_key_heads"],
           "ssm.time_step_rank": hf["linear_num_value_heads"],
           "ssm.inner_size": hf["linear_value_head_dim"] * hf["linear_num_value_heads"],
           "full_attention_interval": _interval(hf)}
    if qwen35:
        out["rope.dimension_sections"] = _sections(rope_dims)
    if hf.get("num_experts"):
        if hf.get("mlp_only_layers") or hf.get("decoder_sparse_step", 1) != 1:
            raise GlassformerError("llama.cpp's qwen3next has experts in every layer; a config "
                                   "with mlp_only_layers or decoder_sparse_step > 1 has no GGUF "
                                   "form")
        out.update({"expert_count": hf["num_experts"],
                    "expert_used_count": hf["num_experts_per_tok"],
                    "expert_feed_forward_length": hf["moe_intermediate_size"],
                    "expert_shared_feed_forward_length": hf["shared_expert_intermediate_size"],
                    "expert_weights_norm": bool(hf["norm_topk_prob"])})
    return out


def hf_config(meta, shapes: dict, *, model_type: str) -> dict:
    """The file's {arch}.* keys -> the config.json io/hf/qwen3_next.py reads."""
    d_model = meta.int("embedding_length", "the model width C")
    n_head = meta.int("attention.head_count", "full attention's query heads")
    n_layer = meta.layers()
    head_dim = meta.int("attention.key_length", "full attention's head width",
                        default=d_model // max(n_head, 1))
    rope_dims = meta.int("rope.dimension_count", "how many dims of a head RoPE turns",
                         default=head_dim // 4)
    if meta.get("rope.scaling.type", "the RoPE scaling", default="none") != "none":
        raise GlassformerError(f"{meta.path}: RoPE scaling is not supported for {meta.arch}")
    if model_type == "qwen3_5_text":
        _check_sections(meta, rope_dims)
    every = meta.int("full_attention_interval", "every how many layers one is full attention",
                     default=4)
    if every < 1:
        raise CheckpointError(f"{meta.path}: {meta.arch}.full_attention_interval is {every}, "
                              "expected K >= 1 (layer i is full attention when (i + 1) % K == 0)")
    hv = meta.int("ssm.time_step_rank", "the Gated DeltaNet's value heads Hv")
    hf = {"model_type": model_type, "num_hidden_layers": n_layer, "hidden_size": d_model,
          "vocab_size": meta.int("vocab_size", "the vocabulary size",
                                 default=shapes["token_embd.weight"][0]),
          "intermediate_size": meta.int("feed_forward_length", "the SwiGLU width F"),
          "num_attention_heads": n_head,
          "num_key_value_heads": meta.int("attention.head_count_kv", "the key/value heads"),
          "head_dim": head_dim,
          "max_position_embeddings": meta.int("context_length", "the context length"),
          "rms_norm_eps": meta.float("attention.layer_norm_rms_epsilon", "the RMSNorm eps"),
          "rope_parameters": {"rope_type": "default",
                              "rope_theta": meta.float("rope.freq_base", "the RoPE base"),
                              "partial_rotary_factor": rope_dims / head_dim},
          "tie_word_embeddings": "output.weight" not in shapes,
          "layer_types": ["full_attention" if (i + 1) % every == 0
                          else "linear_attention" for i in range(n_layer)],
          "linear_conv_kernel_dim": meta.int("ssm.conv_kernel", "the short conv's taps W"),
          "linear_key_head_dim": meta.int("ssm.state_size", "the key head width Dk"),
          "linear_num_key_heads": meta.int("ssm.group_count", "the key heads Hk"),
          "linear_num_value_heads": hv,
          "linear_value_head_dim": meta.int("ssm.inner_size", "Hv x the value head width Dv")
          // max(hv, 1),
          "hidden_act": "silu", "attention_bias": False}
    n_experts = meta.int("expert_count", "the number of experts", default=0)
    held = shapes.get("blk.0.ffn_gate_inp.weight", (0,))[0]    # the router: (E, C)
    if n_experts and held != n_experts:   # before any per-expert name is made
        raise CheckpointError(f"{meta.path}: {meta.arch}.expert_count={n_experts}, but "
                              f"blk.0.ffn_gate_inp.weight (the router) holds {held} experts")
    if n_experts and model_type == "qwen3_next":
        hf.update(num_experts=n_experts, decoder_sparse_step=1, mlp_only_layers=[],
                  num_experts_per_tok=meta.int("expert_used_count", "experts per token"),
                  moe_intermediate_size=meta.int("expert_feed_forward_length",
                                                 "one expert's width"),
                  shared_expert_intermediate_size=meta.int(
                      "expert_shared_feed_forward_length", "the shared expert's width",
                      default=0),
                  norm_topk_prob=bool(meta.get("expert_weights_norm", "whether the chosen "
                                               "weights are normalised", default=True)))
    return hf


QWEN3_NEXT = GGUFArch("qwen3next", "qwen3_next", "qwen3_next",
                      lambda meta, shapes: hf_config(meta, shapes, model_type="qwen3_next"),
                      lambda hf: metadata(hf, qwen35=False), lambda hf: rows(hf, tiled=False))
QWEN3_5 = GGUFArch("qwen35", "qwen3_5", "qwen3_5_text",
                   lambda meta, shapes: hf_config(meta, shapes, model_type="qwen3_5_text"),
                   lambda hf: metadata(hf, qwen35=True), lambda hf: rows(hf, tiled=True))
