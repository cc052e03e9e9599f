"""DeepSeek-V3 in Hugging Face form: model_type deepseek_v3 (DeepseekV3ForCausalLM files).

The attention is multi-head latent attention (blocks/mla.py): q_a_proj, q_a_layernorm and
q_b_proj (or q_proj without q_lora_rank), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj and
o_proj. RoPE scaling reads as LLaMA's (io/hf/rope.py), plus mscale_all_dim, the YaRN factor of
DeepSeek's softmax scale. Layers at or past first_k_dense_replace hold DeepSeek-V3's mixture of
experts: the router mlp.gate (weight and e_score_correction_bias), one tensor per expert under
mlp.experts.{e} (stacked into (E, in, out) arrays: io/hf_names.py's Stack rows) and the shared
experts mlp.shared_experts. Only sigmoid scoring with the bias-corrected top-k is implemented
(scoring_func, topk_method).
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.io.hf import llama
from glassformer.io.hf.records import HFFamily, ModelType, Rename, Stack, norm
from glassformer.io.hf.rope import rope_fields_from_hf, rope_parameters_to_hf
from glassformer.models.deepseek_v3 import DeepseekV3Config

_ATTN = "layers.{i}.self_attn."
_MLP = "layers.{i}.mlp."
# our SwiGLU weight -> the name of its nn.Linear (dense MLP, each expert, the shared experts)
_LINEARS = {"w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}

# Outside the layers a DeepSeek-V3 file is named as a LLaMA one (embeddings, final norm, head)
NAMES = llama.NAMES._replace(
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
           # dense layers (the first first_k_dense_replace)
           *(Rename(f"mlp.{ours}", f"{_MLP}{theirs}.weight", True)
             for ours, theirs in _LINEARS.items()),
           # sparse layers; io/hf_names.py skips the rows a layer's params lack
           Rename("mlp.router", _MLP + "gate.weight", True),                       # (C, E)
           Rename("mlp.router_bias", _MLP + "gate.e_score_correction_bias", False),  # (E,)
           *(Stack(f"mlp.experts.{ours}", f"{_MLP}experts.{{e}}.{theirs}.weight", True)
             for ours, theirs in _LINEARS.items()),                                # (E, in, out)
           *(Rename(f"mlp.shared.{ours}", f"{_MLP}shared_experts.{theirs}.weight", True)
             for ours, theirs in _LINEARS.items())))

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
    """A config.json of model_type deepseek_v3 -> DeepseekV3Config (transformers' defaults for
    the keys it leaves out)."""
    n_layer = hf["num_hidden_layers"]
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
        rope_mscale_all_dim=float(rope.get("mscale_all_dim") or 0.0), **rope_fields,
        **_moe_fields(hf, n_layer))


def _moe_fields(hf: dict, n_layer: int) -> dict:
    """The MoE fields; none (every layer dense) when first_k_dense_replace covers all layers.
    Defaults are transformers' DeepseekV3Config's."""
    dense = hf.get("first_k_dense_replace", 3)
    if dense >= n_layer:
        return {}
    n_experts, k = hf.get("n_routed_experts", 256), hf.get("num_experts_per_tok", 8)
    if not 1 <= k <= n_experts:
        raise GlassformerError(f"num_experts_per_tok={k} must be between 1 and "
                               f"n_routed_experts={n_experts} (each token picks that many experts)")
    return dict(n_experts=n_experts, experts_per_token=k,
                expert_d_ff=hf.get("moe_intermediate_size", 2048),
                n_shared_experts=hf.get("n_shared_experts", 1), first_k_dense_replace=dense,
                n_group=hf.get("n_group", 8), topk_group=hf.get("topk_group", 4),
                norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
                routed_scaling_factor=float(hf.get("routed_scaling_factor", 2.5)))


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
            "intermediate_size": cfg.hidden, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head, "num_key_value_heads": cfg.n_head,
            **_moe_to_hf(cfg),
            "q_lora_rank": cfg.q_lora_rank, "kv_lora_rank": cfg.kv_lora_rank,
            "qk_nope_head_dim": cfg.qk_nope_head_dim, "qk_rope_head_dim": cfg.qk_rope_head_dim,
            "v_head_dim": cfg.v_head_dim, "rope_interleave": cfg.rope_interleave,
            "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": cfg.norm_eps,
            "hidden_act": "silu", "rope_theta": cfg.rope_theta, "rope_parameters": rope,
            "tie_word_embeddings": cfg.tie_embeddings, "attention_bias": False,
            "attention_dropout": 0.0, "num_nextn_predict_layers": 0, "dtype": "float32"}


def _moe_to_hf(cfg: DeepseekV3Config) -> dict:
    """The MoE keys: every one, so transformers' defaults (256 experts...) never apply."""
    if cfg.moe() is None:
        return {"first_k_dense_replace": cfg.n_layer}   # every layer dense
    return {"first_k_dense_replace": cfg.first_k_dense_replace,
            "n_routed_experts": cfg.n_experts, "num_experts_per_tok": cfg.experts_per_token,
            "moe_intermediate_size": cfg.expert_d_ff, "n_shared_experts": cfg.n_shared_experts,
            "n_group": cfg.n_group, "topk_group": cfg.topk_group,
            "norm_topk_prob": cfg.norm_topk_prob,
            "routed_scaling_factor": cfg.routed_scaling_factor}


FAMILY = HFFamily("deepseek_v3", (DEEPSEEK_V3,), to_hf, NAMES)
