"""models/moe.py in Hugging Face form: model_types qwen3, qwen3_moe and olmoe.

All three load as glassformer's arch "moe" (LLaMA's decoder with QK-norm and sparse MoE MLPs):

    qwen3       dense SwiGLU MLPs, QK-norm over each head (q_norm, k_norm (D,))
    qwen3_moe   MoE MLPs (mlp.gate = the router, mlp.experts.{e}.*), QK-norm per head; layers
                with (i + 1) % decoder_sparse_step != 0, and those mlp_only_layers lists, keep
                a dense MLP of intermediate_size (mlp.gate_proj, up_proj, down_proj)
    olmoe       MoE MLPs, QK-norm over the whole q and k projections ((H*D,), (K*D,))

Each expert's three nn.Linear weights are stored one tensor per expert, which glassformer stacks
into (E, in, out) arrays (io/hf_names.py's Stack rows): transformers 5 fuses them into
gate_up_proj in memory but writes and reads these per-expert names. Mixtral's tensors have other
names, so it is an arch of its own (io/hf/mixtral.py), built from the same table maker.
Written back, a config is a qwen3, qwen3_moe or olmoe folder, whichever computes the same model.
"""
from __future__ import annotations

from dataclasses import asdict
from functools import partial

from glassformer.errors import GlassformerError
from glassformer.io.hf import llama
from glassformer.io.hf.windows import layer_types
from glassformer.io.hf.records import (FamilyNames, HFFamily, ModelType, Rename, Stack,
                                       attention, norm)
from glassformer.models.moe import MoeLlamaConfig

# our expert weight -> the HF name of its nn.Linear in each expert (Qwen / OLMoE naming)
EXPERTS = {"w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}
# keys every MoE config.json may carry that only training reads (HF's auxiliary loss)
TRAINING_ONLY = frozenset({"output_router_logits", "router_aux_loss_coef"})


def moe_names(mlp: str, experts: dict[str, str]) -> FamilyNames:
    """The rename table of a LLaMA-style MoE decoder whose MLP module is `mlp` ("mlp",
    Mixtral's "block_sparse_moe") and whose experts name their linears `experts`. Rows whose
    glassformer name a config lacks (dense rows in a sparse layer, QK-norm without it) are
    skipped by io/hf_names.py."""
    sparse = [Rename("mlp.router", f"layers.{{i}}.{mlp}.gate.weight", True)]      # (C, E)
    sparse += [Stack(f"mlp.experts.{ours}", f"layers.{{i}}.{mlp}.experts.{{e}}.{theirs}.weight",
                     True) for ours, theirs in experts.items()]                   # (E, in, out)
    return FamilyNames(
        prefix=llama.NAMES.prefix,
        outside=llama.NAMES.outside,
        top=llama.NAMES.top,          # embeddings, final norm, LM head: LLaMA's
        layer=(*norm("norm1", "layers.{i}.input_layernorm", bias=False),
               *attention(*(f"layers.{{i}}.self_attn.{x}_proj" for x in ("q", "k", "v", "o"))),
               Rename("attn.q_norm", "layers.{i}.self_attn.q_norm.weight", False),
               Rename("attn.k_norm", "layers.{i}.self_attn.k_norm.weight", False),
               *norm("norm2", "layers.{i}.post_attention_layernorm", bias=False),
               *(Rename(f"mlp.{ours}", f"layers.{{i}}.mlp.{theirs}.weight", True)
                 for ours, theirs in EXPERTS.items()),                          # dense layers
               *sparse),
        tied=llama.NAMES.tied,
        ignored=llama.NAMES.ignored)


NAMES = moe_names("mlp", EXPERTS)


def moe_fields(hf: dict, experts_key: str) -> dict:
    """The expert count, k and norm_topk_prob of a config.json (experts under `experts_key`),
    with k checked against the count in HF's names."""
    n_experts = hf[experts_key]
    k = hf["num_experts_per_tok"]
    if not 1 <= k <= n_experts:
        raise GlassformerError(f"num_experts_per_tok={k} must be between 1 and "
                               f"{experts_key}={n_experts} (each token picks that many experts)")
    return dict(n_experts=n_experts, experts_per_token=k)


def from_hf(hf: dict, *, kind: str) -> MoeLlamaConfig:
    """config.json of `kind` ("qwen3", "qwen3_moe", "olmoe") -> MoeLlamaConfig: LLaMA's fields
    as io/hf/llama.py reads them, then QK-norm and the experts."""
    base = asdict(llama.from_hf(hf))
    if kind == "qwen3":
        return MoeLlamaConfig(**base, qk_norm="head", n_experts=0)
    experts_key = "num_local_experts" if "num_local_experts" in hf else "num_experts"
    moe = moe_fields(hf, experts_key)
    norm_topk = bool(hf.get("norm_topk_prob", False))
    if kind == "olmoe":
        return MoeLlamaConfig(**base, qk_norm="proj", norm_topk_prob=norm_topk, **moe)
    return MoeLlamaConfig(**base, qk_norm="head", norm_topk_prob=norm_topk,
                          expert_d_ff=hf["moe_intermediate_size"],
                          sparse_step=hf.get("decoder_sparse_step", 1),
                          extra_dense_layers=mlp_only_layers(hf), **moe)


def mlp_only_layers(hf: dict) -> tuple[int, ...]:
    """Qwen3-MoE's mlp_only_layers (None or absent: none), each a layer of the model."""
    listed = hf.get("mlp_only_layers") or []
    n_layer = hf["num_hidden_layers"]
    if not isinstance(listed, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layer for i in listed):
        raise GlassformerError(f"config.json has mlp_only_layers={listed!r}; it lists layer "
                               f"indices from 0 to num_hidden_layers - 1 = {n_layer - 1}")
    return tuple(listed)


QWEN3_READS = llama.READS | {"use_sliding_window", "sliding_window", "max_window_layers",
                             "layer_types"}
QWEN3 = ModelType("qwen3", "moe", "Qwen3ForCausalLM", QWEN3_READS,
                  required={"hidden_act": ("silu",)},
                  from_hf=partial(from_hf, kind="qwen3"))
QWEN3_MOE = ModelType(
    "qwen3_moe", "moe", "Qwen3MoeForCausalLM",
    QWEN3_READS | TRAINING_ONLY | {"decoder_sparse_step", "moe_intermediate_size",
                                   "norm_topk_prob", "num_experts_per_tok", "num_experts",
                                   "num_local_experts", "mlp_only_layers"},
    required={"hidden_act": ("silu",)},
    from_hf=partial(from_hf, kind="qwen3_moe"))
OLMOE = ModelType(
    "olmoe", "moe", "OlmoeForCausalLM",
    llama.READS | TRAINING_ONLY | {"norm_topk_prob", "num_experts_per_tok", "num_experts"},
    required={"hidden_act": ("silu",), "clip_qkv": (None,)},
    from_hf=partial(from_hf, kind="olmoe"))


def llama_keys(cfg: MoeLlamaConfig) -> dict:
    """The config.json keys LLaMA's to_hf writes for the shared fields, less its model_type's."""
    if cfg.qkv_bias != cfg.out_bias:
        raise GlassformerError("Qwen3, Qwen3-MoE, OLMoE and Mixtral have biases on all four "
                               "attention projections or none (qkv_bias == out_bias)")
    hf = llama.to_hf(cfg)
    for key in ("architectures", "model_type", "mlp_bias"):
        hf.pop(key)
    return hf


def check_plain_routing(cfg: MoeLlamaConfig, model_type: ModelType) -> None:
    """Softmax top-k routing without DeepSeek's or Qwen2-MoE's extras: what these classes run."""
    if (cfg.scoring, cfg.routed_scaling_factor, cfg.n_group, cfg.router_bias, cfg.shared_d_ff,
            cfg.first_dense_layers) != ("softmax", 1.0, 1, False, 0, 0):
        raise GlassformerError(f"{model_type.hf_class} routes by softmax top-k only: no sigmoid "
                               "scores, scaling, groups, router bias, shared expert or first "
                               "dense layers")


def to_hf(cfg: MoeLlamaConfig) -> dict:
    """The config.json transformers needs to rebuild this model (qwen3, qwen3_moe or olmoe)."""
    hf = llama_keys(cfg)
    qwen = {"use_sliding_window": cfg.sliding_window is not None,
            "sliding_window": cfg.sliding_window, "max_window_layers": 0,
            "layer_types": layer_types(cfg)}
    if cfg.n_experts == 0 and cfg.qk_norm == "head":
        model_type, extra = QWEN3, qwen
    elif cfg.qk_norm == "head":
        model_type = QWEN3_MOE
        extra = {**qwen, "num_experts": cfg.n_experts, "num_experts_per_tok": cfg.experts_per_token,
                 "moe_intermediate_size": cfg.moe_config().expert_d_ff,
                 "norm_topk_prob": cfg.norm_topk_prob, "decoder_sparse_step": cfg.sparse_step,
                 "mlp_only_layers": list(cfg.extra_dense_layers)}
    elif (cfg.qk_norm == "proj" and cfg.n_experts and cfg.sparse_step == 1
          and not cfg.extra_dense_layers):
        model_type = OLMOE
        extra = {"num_experts": cfg.n_experts, "num_experts_per_tok": cfg.experts_per_token,
                 "intermediate_size": cfg.moe_config().expert_d_ff,
                 "norm_topk_prob": cfg.norm_topk_prob, "clip_qkv": None}
    else:
        raise GlassformerError(f"no Hugging Face family computes qk_norm={cfg.qk_norm!r} with "
                               f"n_experts={cfg.n_experts}, sparse_step={cfg.sparse_step} "
                               f"and extra_dense_layers={list(cfg.extra_dense_layers)} "
                               "(qwen3: 'head' and 0; qwen3_moe: 'head'; olmoe: 'proj', step 1, "
                               "no extra dense layers)")
    if model_type is not QWEN3:
        check_plain_routing(cfg, model_type)
    return {"architectures": [model_type.hf_class], "model_type": model_type.name, **hf, **extra}


FAMILY = HFFamily("moe", (QWEN3, QWEN3_MOE, OLMOE), to_hf, NAMES)
