"""DeepSeek-V3 in Hugging Face form: model_type deepseek_v3 (DeepseekV3ForCausalLM files).

The attention is multi-head latent attention (blocks/mla.py): q_a_proj, q_a_layernorm and
q_b_proj (or q_proj without q_lora_rank), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj and
o_proj. RoPE scaling reads as LLaMA's (io/hf/rope.py), plus mscale_all_dim, the YaRN factor of
DeepSeek's softmax scale. Layers at or past first_k_dense_replace hold a sparse MoE MLP, which
this loader does not build yet: such a config.json is refused in one line.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.io.hf.records import LM_HEAD, FamilyNames, HFFamily, ModelType, Rename, norm
from glassformer.io.hf.rope import rope_fields_from_hf, rope_parameters_to_hf
from glassformer.models.deepseek_v3 import DeepseekV3Config

_ATTN = "layers.{i}.self_attn."

NAMES = FamilyNames(
    prefix="model.",
    outside=("lm_head.",),
    top=(Rename("tok_emb", "embed_tokens.weight", False),
         *norm("norm_f", "norm", bias=False),
         LM_HEAD),
    layer=(*norm("norm1", "layers.{i}.input_layernorm", bias=False),
           Rename("attn.wq", _ATTN + "q_proj.weight", True),            # without q_lora_rank
           Rename("attn.wq_a", _ATTN + "q_a_proj.weight", True),        # with q_lora_rank
           *norm("attn.q_norm", _ATTN + "q_a_layernorm", bias=False),
           Rename("attn.wq_b", _ATTN + "q_b_proj.weight", True),
           Rename("attn.wkv_a", _ATTN + "kv_a_proj_with_mqa.weight", True),
           *norm("attn.kv_norm", _ATTN + "kv_a_layernorm", bias=False),
           Rename("attn.wkv_b", _ATTN + "kv_b_proj.weight", True),
           Rename("attn.wo", _ATTN + "o_proj.weight", True),
           *norm("norm2", "layers.{i}.post_attention_layernorm", bias=False),
           Rename("mlp.w_gate", "layers.{i}.mlp.gate_proj.weight", True),
           Rename("mlp.w_up", "layers.{i}.mlp.up_proj.weight", True),
           Rename("mlp.w_down", "layers.{i}.mlp.down_proj.weight", True)),
    tied={"lm_head.weight": "embed_tokens.weight"},
    ignored=(r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq",))

# The MoE keys: read, and refused while a layer would use them (see the module docstring).
MOE_KEYS = frozenset({
    "n_routed_experts", "n_shared_experts", "moe_intermediate_size", "num_experts_per_tok",
    "routed_scaling_factor", "n_group", "topk_group", "norm_topk_prob", "first_k_dense_replace",
    "output_router_logits",    # returns router logits; changes no logit
    "ep_size", "aux_loss_alpha", "seq_aux"})   # expert parallelism, training-only loss settings

READS = MOE_KEYS | frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rms_norm_eps",
    "rope_theta", "rope_parameters", "rope_scaling", "rope_interleave", "tie_word_embeddings",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "qk_head_dim", "head_dim",   # derived by transformers (Dn + Dr, and Dr): checked
    "attention_dropout",       # glassformer has no attention-weight dropout (training)
    "pretraining_tp",          # tensor-parallel slicing of the same matmuls
    # multi-token prediction modules, which DeepseekV3ForCausalLM neither builds nor runs
    "num_nextn_predict_layers", "num_mtp_layers"})


def from_hf(hf: dict) -> DeepseekV3Config:
    """A config.json of model_type deepseek_v3 -> DeepseekV3Config (dense layers only)."""
    n_layer = hf["num_hidden_layers"]
    dense = hf.get("first_k_dense_replace", 3)   # transformers' default
    if dense < n_layer:
        raise GlassformerError(f"config.json has first_k_dense_replace={dense} < "
                               f"num_hidden_layers={n_layer}: its sparse MoE layers are not "
                               "implemented by glassformer's deepseek_v3 yet")
    n_head = hf["num_attention_heads"]
    if hf.get("num_key_value_heads") not in (None, n_head):
        raise GlassformerError(f"config.json has num_key_value_heads="
                               f"{hf['num_key_value_heads']}; MLA makes one key and value per "
                               f"head (expected num_attention_heads={n_head})")
    _check_derived(hf)
    rope_fields = rope_fields_from_hf(hf)
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    return DeepseekV3Config(
        vocab_size=hf["vocab_size"], max_seq_len=hf["max_position_embeddings"],
        n_layer=n_layer, n_head=n_head, d_model=hf["hidden_size"],
        d_ff=hf["intermediate_size"], norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        q_lora_rank=hf.get("q_lora_rank"), kv_lora_rank=hf["kv_lora_rank"],
        qk_nope_head_dim=hf["qk_nope_head_dim"], qk_rope_head_dim=hf["qk_rope_head_dim"],
        v_head_dim=hf["v_head_dim"], rope_interleave=bool(hf.get("rope_interleave", True)),
        rope_mscale_all_dim=float(rope.get("mscale_all_dim") or 0.0), **rope_fields)


def _check_derived(hf: dict) -> None:
    """qk_head_dim and head_dim, when written, must be what transformers derives."""
    derived = {"qk_head_dim": hf["qk_nope_head_dim"] + hf["qk_rope_head_dim"],
               "head_dim": hf["qk_rope_head_dim"]}
    for key, value in derived.items():
        if hf.get(key) not in (None, value):
            raise GlassformerError(f"config.json has {key}={hf[key]}, but its MLA widths give "
                                   f"{value}")


DEEPSEEK_V3 = ModelType(
    "deepseek_v3", "deepseek_v3", "DeepseekV3ForCausalLM", READS,
    required={"hidden_act": ("silu",), "attention_bias": (False,),
              "scoring_func": ("sigmoid",), "topk_method": ("noaux_tc",),
              "moe_layer_freq": (1,)},
    from_hf=from_hf)


def to_hf(cfg: DeepseekV3Config) -> dict:
    """The config.json transformers needs to rebuild this model."""
    rope = rope_parameters_to_hf(cfg)
    if cfg.rope_type != "default" and cfg.rope_mscale_all_dim:
        rope["mscale_all_dim"] = cfg.rope_mscale_all_dim
    return {"architectures": [DEEPSEEK_V3.hf_class], "model_type": DEEPSEEK_V3.name,
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
            "intermediate_size": cfg.d_ff, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head, "num_key_value_heads": cfg.n_head,
            "first_k_dense_replace": cfg.n_layer,   # every layer dense
            "q_lora_rank": cfg.q_lora_rank, "kv_lora_rank": cfg.kv_lora_rank,
            "qk_nope_head_dim": cfg.qk_nope_head_dim, "qk_rope_head_dim": cfg.qk_rope_head_dim,
            "v_head_dim": cfg.v_head_dim, "rope_interleave": cfg.rope_interleave,
            "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": cfg.norm_eps,
            "hidden_act": "silu", "rope_theta": cfg.rope_theta, "rope_parameters": rope,
            "tie_word_embeddings": cfg.tie_embeddings, "attention_bias": False,
            "attention_dropout": 0.0, "num_nextn_predict_layers": 0, "dtype": "float32"}


FAMILY = HFFamily("deepseek_v3", (DEEPSEEK_V3,), to_hf, NAMES)
