"""LLaMA in Hugging Face form: model_types llama, qwen2 and mistral (*ForCausalLM / *Model files).

All three are glassformer's LLaMA: pre-RMSNorm, RoPE (io/hf/rope.py), SwiGLU, grouped KV heads.
Qwen2 adds biases to q, k and v; Mistral and Qwen2 may slide an attention window, which glassformer
applies as they do (io/hf/windows.py: Mistral slides every layer, Qwen2 those its layer_types
name). Written back, a config is a llama folder, a mistral one when it slides a window, or a
qwen2 one when only q, k and v have biases.
"""
from __future__ import annotations

from functools import partial

from glassformer.errors import GlassformerError
from glassformer.io.hf.records import (LM_HEAD, FamilyNames, HFFamily, ModelType, Rename,
                                       attention, norm)
from glassformer.io.hf.rope import rope_fields_from_hf, rope_parameters_to_hf
from glassformer.io.hf.windows import layer_types, window_fields
from glassformer.models.llama import LlamaConfig


NAMES = FamilyNames(
    prefix="model.",
    outside=("lm_head.",),
    top=(Rename("tok_emb", "embed_tokens.weight", False),
         *norm("norm_f", "norm", bias=False),
         LM_HEAD),
    layer=(*norm("norm1", "layers.{i}.input_layernorm", bias=False),
           # Qwen2 has q, k and v biases, a llama folder with attention_bias all four
           *attention(*(f"layers.{{i}}.self_attn.{x}_proj" for x in ("q", "k", "v", "o"))),
           *norm("norm2", "layers.{i}.post_attention_layernorm", bias=False),
           Rename("mlp.w_gate", "layers.{i}.mlp.gate_proj.weight", True),
           Rename("mlp.w_up", "layers.{i}.mlp.up_proj.weight", True),
           Rename("mlp.w_down", "layers.{i}.mlp.down_proj.weight", True)),
    tied={"lm_head.weight": "embed_tokens.weight"},
    ignored=(r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq",))

READS = frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "rope_parameters", "rope_scaling", "attention_bias",
    "tie_word_embeddings",
    "attention_dropout",       # glassformer has no attention-weight dropout (training)
    "pretraining_tp",          # tensor-parallel slicing of the same matmuls
    "is_llama_config"})        # a marker in SmolLM2's config


def from_hf(hf: dict, *, qkv_bias: bool = False, window_by_default: bool = False) -> LlamaConfig:
    """A config.json of model_type llama, qwen2 or mistral -> LlamaConfig.

    qkv_bias: the model_type always has q, k, v biases (Qwen2). window_by_default: a
    sliding_window is in use unless use_sliding_window says otherwise (Mistral).
    Keys that would change the math and that glassformer does not implement (longrope, MLP
    biases) raise a GlassformerError. The window slides as transformers slides it (Mistral:
    every layer; Qwen2: with use_sliding_window, the layers its layer_types name), with no cap
    on the context. Dynamic NTK RoPE has no end: max_seq_len is set to factor x
    max_position_embeddings.
    """
    rope = rope_fields_from_hf(hf)
    context = hf["max_position_embeddings"]
    windows = window_fields(hf, in_use=hf.get("use_sliding_window", window_by_default),
                            every_layer=window_by_default)
    if rope["rope_type"] == "dynamic":
        context = int(context * rope["rope_factor"])
    n_head = hf["num_attention_heads"]
    attention_bias = bool(hf.get("attention_bias", False))
    head_dim = hf.get("head_dim")
    if head_dim == hf["hidden_size"] // n_head:
        head_dim = None  # the default, stored as such so configs compare equal
    return LlamaConfig(vocab_size=hf["vocab_size"], max_seq_len=context,
                       n_layer=hf["num_hidden_layers"], n_head=n_head,
                       n_kv_head=hf.get("num_key_value_heads") or n_head,
                       d_model=hf["hidden_size"], d_ff=hf["intermediate_size"],
                       norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
                       qkv_bias=qkv_bias or attention_bias, out_bias=attention_bias,
                       tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
                       head_dim=head_dim, **rope, **windows)


LLAMA = ModelType(
    "llama", "llama", "LlamaForCausalLM", READS,
    required={"hidden_act": ("silu",), "mlp_bias": (False,), "rope_interleaved": (False, None)},
    from_hf=from_hf)
QWEN2 = ModelType(
    "qwen2", "llama", "Qwen2ForCausalLM",
    READS | {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"},
    required={"hidden_act": ("silu",), "use_mrope": (False, None)},
    from_hf=partial(from_hf, qkv_bias=True))
MISTRAL = ModelType(
    "mistral", "llama", "MistralForCausalLM", READS | {"sliding_window", "layer_types"},
    required={"hidden_act": ("silu",)},
    from_hf=partial(from_hf, window_by_default=True))


def to_hf(cfg: LlamaConfig) -> dict:
    """The config.json transformers needs to rebuild this model (llama, mistral or qwen2)."""
    windowed = cfg.sliding_window is not None
    if cfg.qkv_bias and not cfg.out_bias:
        model_type, extra = QWEN2, {"use_sliding_window": windowed,
                                    "sliding_window": cfg.sliding_window,
                                    "max_window_layers": 0, "layer_types": layer_types(cfg)}
    elif windowed:
        if cfg.qkv_bias or cfg.full_layers:
            raise GlassformerError("a Mistral folder slides the window in every layer and has no "
                                   "attention biases; this config has full_layers or biases")
        model_type, extra = MISTRAL, {"sliding_window": cfg.sliding_window}
    elif cfg.qkv_bias == cfg.out_bias:
        model_type, extra = LLAMA, {"attention_bias": cfg.qkv_bias, "mlp_bias": False}
    else:
        raise GlassformerError("no Hugging Face family has an attention output bias without "
                               "q/k/v biases (out_bias=True, qkv_bias=False)")
    bcfg = cfg.block_config()
    rope = rope_parameters_to_hf(cfg)
    scaling = {} if cfg.rope_type == "default" else {"rope_scaling": rope}
    # dynamic NTK scales from max_position_embeddings on: it is the original context there
    dynamic = cfg.rope_type == "dynamic"
    context = cfg.rope_original_max_seq_len if dynamic else cfg.max_seq_len
    return {"architectures": [model_type.hf_class], "model_type": model_type.name,
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
            "intermediate_size": cfg.hidden, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head, "num_key_value_heads": bcfg.kv_heads,
            "head_dim": bcfg.dim_per_head, "max_position_embeddings": context,
            "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu",
            # transformers 5 reads rope_parameters, 4.x reads rope_theta (and rope_scaling)
            "rope_theta": cfg.rope_theta, "rope_parameters": rope, **scaling,
            "tie_word_embeddings": cfg.tie_embeddings, "attention_dropout": 0.0,
            "dtype": "float32", **extra}


FAMILY = HFFamily("llama", (LLAMA, QWEN2, MISTRAL), to_hf, NAMES)
