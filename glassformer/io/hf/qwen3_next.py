"""Qwen3-Next and Qwen3.5 (text) in Hugging Face form: model_types qwen3_next
(Qwen3NextForCausalLM) and qwen3_5_text (Qwen3_5ForCausalLM).

Layers by `layer_types`: "linear_attention" (linear_attn.*: Gated DeltaNet) or "full_attention"
(self_attn.*: gated attention); io/hf_names.py skips the rows a layer's params lack. What is not
a rename (Convert rows, the functions below):
- Qwen3-Next's in_proj_qkvz joins, per key head, [q (Dk) | k (Dk) | v (G Dv) | z (G Dv)] and its
  in_proj_ba [b (G) | a (G)] (G = Hv / Hk); Qwen3.5 has in_proj_qkv (q | k | v), in_proj_z,
  in_proj_b, in_proj_a, plain. Both become wq, wk, wv, wz, wb, wa.
- self_attn.q_proj joins, per head, [q (D) | gate (D)]: wq and w_gate.
- conv1d.weight is (Dc, 1, W): linear.conv (Dc, W).
- the RMSNorms (input, post-attention, final, q_norm, k_norm) store w with the scale 1 + w:
  ours hold 1 + w (linear_attn.norm, the gated norm, scales by w and is a plain rename).
The MoE (Qwen3-Next): mlp.gate (router), mlp.experts.{e}.* (per-expert tensors in files),
mlp.shared_expert.*, mlp.shared_expert_gate.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.hf import llama
from glassformer.io.hf.records import Convert, HFFamily, ModelType, Rename, Stack
from glassformer.models.qwen3_5 import Qwen35Config
from glassformer.models.qwen3_next import Qwen3NextConfig

_LIN = "layers.{i}.linear_attn."
_ATTN = "layers.{i}.self_attn."
_MLP = "layers.{i}.mlp."
_LINEARS = {"w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}


# ---------------------------------------------------------------- the conversions
def _norm_row(ours: str, theirs: str) -> Convert:
    """A zero-centred RMSNorm: HF stores w, the scale is 1 + w; ours holds the scale."""
    return Convert((ours,), (theirs,), load=lambda cfg, w: (w + 1.0,),
                   save=lambda cfg, w: (w - 1.0,), shapes=lambda cfg, shape: (shape,))


def _per_group(cfg, weight: np.ndarray, widths: list[int]) -> list[np.ndarray]:
    """An (out, C) nn.Linear weight whose rows are `groups` repeats of parts `widths` ->
    each part, all groups side by side, as (C, groups * width)."""
    groups = weight.shape[0] // sum(widths)
    rows = weight.reshape(groups, sum(widths), -1)                        # (groups, sum, C)
    parts, start = [], 0
    for width in widths:
        part = rows[:, start:start + width]                               # (groups, width, C)
        parts.append(part.reshape(groups * width, -1).T)                  # -> (C, groups*width)
        start += width
    return parts


def _joined(parts: list[np.ndarray], groups: int) -> np.ndarray:
    """The inverse of _per_group: (C, groups * w_j) parts -> (groups * sum w, C)."""
    c = parts[0].shape[0]
    pieces = [p.T.reshape(groups, -1, c) for p in parts]                  # (groups, w_j, C)
    return np.concatenate(pieces, axis=1).reshape(-1, c)


def _qkvz_widths(cfg) -> list[int]:
    g = cfg.linear_v_heads // cfg.linear_k_heads
    dk, dv = cfg.linear_k_head_dim, cfg.linear_v_head_dim
    return [dk, dk, g * dv, g * dv]


def _ba_widths(cfg) -> list[int]:
    g = cfg.linear_v_heads // cfg.linear_k_heads
    return [g, g]


QKVZ = Convert(
    ("linear.wq", "linear.wk", "linear.wv", "linear.wz"), (_LIN + "in_proj_qkvz.weight",),
    load=lambda cfg, w: _per_group(cfg, w, _qkvz_widths(cfg)),
    save=lambda cfg, *parts: (_joined(list(parts), cfg.linear_k_heads),),
    shapes=lambda cfg, *shapes: ((sum(s[1] for s in shapes), shapes[0][0]),))
BA = Convert(
    ("linear.wb", "linear.wa"), (_LIN + "in_proj_ba.weight",),
    load=lambda cfg, w: _per_group(cfg, w, _ba_widths(cfg)),
    save=lambda cfg, *parts: (_joined(list(parts), cfg.linear_k_heads),),
    shapes=lambda cfg, *shapes: ((sum(s[1] for s in shapes), shapes[0][0]),))
QKV = Convert(   # Qwen3.5: q | k | v, one after the other
    ("linear.wq", "linear.wk", "linear.wv"), (_LIN + "in_proj_qkv.weight",),
    load=lambda cfg, w: _per_group(cfg, w, [cfg.linear_k_heads * cfg.linear_k_head_dim] * 2
                                   + [cfg.linear_v_heads * cfg.linear_v_head_dim]),
    save=lambda cfg, *parts: (np.concatenate([p.T for p in parts], axis=0),),
    shapes=lambda cfg, *shapes: ((sum(s[1] for s in shapes), shapes[0][0]),))
CONV = Convert(
    ("linear.conv",), (_LIN + "conv1d.weight",),
    load=lambda cfg, w: (w[:, 0, :],), save=lambda cfg, w: (w[:, None, :],),
    shapes=lambda cfg, shape: ((shape[0], 1, shape[1]),))
Q_GATE = Convert(
    ("attn.wq", "attn.w_gate"), (_ATTN + "q_proj.weight",),
    load=lambda cfg, w: _per_group(cfg, w, [cfg.head_dim, cfg.head_dim]),
    save=lambda cfg, q, gate: (_joined([q, gate], cfg.n_head),),
    shapes=lambda cfg, q, gate: ((q[1] + gate[1], q[0]),))


# ---------------------------------------------------------------- the tables
def _layer_rows(linear_rows: tuple) -> tuple:
    return (_norm_row("norm1.w", "layers.{i}.input_layernorm.weight"),
            # a linear_attention layer
            *linear_rows, CONV,
            Rename("linear.dt_bias", _LIN + "dt_bias", False),
            Rename("linear.a_log", _LIN + "A_log", False),
            Rename("linear.norm", _LIN + "norm.weight", False),
            # a full_attention layer
            Q_GATE,
            Rename("attn.wk", _ATTN + "k_proj.weight", True),
            Rename("attn.wv", _ATTN + "v_proj.weight", True),
            Rename("attn.wo", _ATTN + "o_proj.weight", True),
            _norm_row("attn.q_norm", _ATTN + "q_norm.weight"),
            _norm_row("attn.k_norm", _ATTN + "k_norm.weight"),
            _norm_row("norm2.w", "layers.{i}.post_attention_layernorm.weight"),
            *(Rename(f"mlp.{ours}", f"{_MLP}{theirs}.weight", True)
              for ours, theirs in _LINEARS.items()),
            Rename("mlp.router", _MLP + "gate.weight", True),                       # (C, E)
            *(Stack(f"mlp.experts.{ours}", f"{_MLP}experts.{{e}}.{theirs}.weight", True)
              for ours, theirs in _LINEARS.items()),
            *(Rename(f"mlp.shared.{ours}", f"{_MLP}shared_expert.{theirs}.weight", True)
              for ours, theirs in _LINEARS.items()),
            Rename("mlp.shared_gate", _MLP + "shared_expert_gate.weight", True))   # (C, 1)


_NEXT_LINEAR = (QKVZ, BA, Rename("linear.wo", _LIN + "out_proj.weight", True))
_35_LINEAR = (QKV, Rename("linear.wz", _LIN + "in_proj_z.weight", True),
              Rename("linear.wb", _LIN + "in_proj_b.weight", True),
              Rename("linear.wa", _LIN + "in_proj_a.weight", True),
              Rename("linear.wo", _LIN + "out_proj.weight", True))


def _names(linear_rows: tuple):
    """LLaMA's top rows with the zero-centred final norm, and the hybrid layer rows: a linear
    layer's mixer is under "linear.", a full one's under "attn.", so each row fits one kind."""
    top = tuple(row for row in llama.NAMES.top if getattr(row, "ours", None) != "norm_f.w")
    return llama.NAMES._replace(
        top=(*top, _norm_row("norm_f.w", "norm.weight")),
        layer=_layer_rows(linear_rows))


READS = frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "rope_parameters", "tie_word_embeddings", "layer_types",
    "full_attention_interval", "partial_rotary_factor",
    "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
    "linear_num_key_heads", "linear_num_value_heads",
    "attention_dropout",        # no attention-weight dropout here (training only)
    "initializer_range", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id",
    "output_router_logits", "router_aux_loss_coef"})   # router-loss settings: no logit changes
MOE_KEYS = frozenset({"decoder_sparse_step", "moe_intermediate_size",
                      "shared_expert_intermediate_size", "num_experts_per_tok", "num_experts",
                      "norm_topk_prob", "mlp_only_layers"})


def _layer_types(hf: dict) -> tuple[int, ...]:
    """The full-attention layers, from layer_types (or every full_attention_interval-th)."""
    n_layer = hf["num_hidden_layers"]
    types = hf.get("layer_types")
    if types is None:
        every = hf.get("full_attention_interval", 4)
        return tuple(i for i in range(n_layer) if (i + 1) % every == 0)
    if len(types) != n_layer:
        raise GlassformerError(f"config.json layer_types has {len(types)} entries, but "
                               f"num_hidden_layers is {n_layer} (expected one per layer)")
    unknown = sorted(set(types) - {"linear_attention", "full_attention"})
    if unknown:
        raise GlassformerError(f"config.json layer_types has {unknown}; expected "
                               "linear_attention or full_attention")
    return tuple(i for i, kind in enumerate(types) if kind == "full_attention")


def from_hf(hf: dict, *, config=Qwen3NextConfig):
    """A config.json of model_type qwen3_next or qwen3_5_text -> its config (transformers'
    defaults for the keys it leaves out)."""
    rope = hf.get("rope_parameters") or {}
    kind = rope.get("rope_type", "default")
    extra = sorted(set(rope) - {"rope_type", "rope_theta", "partial_rotary_factor",
                                "mrope_section", "mrope_interleaved"})
    if kind != "default" or extra:
        raise GlassformerError(f"config.json rope_parameters asks for {kind!r} RoPE with "
                               f"{extra}; this family implements plain (partial) RoPE")
    moe = {}
    if hf.get("num_experts", 0):
        moe = dict(n_experts=hf["num_experts"], experts_per_token=hf["num_experts_per_tok"],
                   expert_d_ff=hf["moe_intermediate_size"],
                   shared_d_ff=hf.get("shared_expert_intermediate_size", 0),
                   norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
                   sparse_step=hf.get("decoder_sparse_step", 1),
                   dense_layers=tuple(hf.get("mlp_only_layers") or ()))
    return config(
        vocab_size=hf["vocab_size"], max_seq_len=hf["max_position_embeddings"],
        n_layer=hf["num_hidden_layers"], n_head=hf["num_attention_heads"],
        n_kv_head=hf["num_key_value_heads"], d_model=hf["hidden_size"],
        head_dim=hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"]),
        d_ff=hf["intermediate_size"], norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
        partial_rotary_factor=float(rope.get("partial_rotary_factor",
                                             hf.get("partial_rotary_factor", 0.25))),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        full_layers=_layer_types(hf),
        linear_k_heads=hf["linear_num_key_heads"], linear_v_heads=hf["linear_num_value_heads"],
        linear_k_head_dim=hf["linear_key_head_dim"],
        linear_v_head_dim=hf["linear_value_head_dim"],
        conv_width=hf.get("linear_conv_kernel_dim", 4), **moe)


QWEN3_NEXT = ModelType("qwen3_next", "qwen3_next", "Qwen3NextForCausalLM", READS | MOE_KEYS,
                       required={"hidden_act": ("silu",), "attention_bias": (False,)},
                       from_hf=from_hf, layer_types=("linear_attention",))
QWEN3_5 = ModelType("qwen3_5_text", "qwen3_5", "Qwen3_5ForCausalLM", READS,
                    required={"hidden_act": ("silu",), "attention_bias": (False,)},
                    from_hf=lambda hf: from_hf(hf, config=Qwen35Config),
                    layer_types=("linear_attention",))


def to_hf(cfg) -> dict:
    """The config.json transformers needs to rebuild this model."""
    model_type = QWEN3_5 if isinstance(cfg, Qwen35Config) else QWEN3_NEXT
    if model_type is QWEN3_5 and cfg.n_experts:
        raise GlassformerError("Qwen3.5 (qwen3_5_text) has dense MLPs; a config with "
                               "n_experts is a qwen3_next one")
    if cfg.chunk_size != 64:
        raise GlassformerError(f"chunk_size={cfg.chunk_size}: transformers chunks by 64; "
                               "save a config with chunk_size=64 (the numbers do not change)")
    out = {"architectures": [model_type.hf_class], "model_type": model_type.name,
           "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
           "intermediate_size": cfg.d_ff, "num_hidden_layers": cfg.n_layer,
           "num_attention_heads": cfg.n_head, "num_key_value_heads": cfg.n_kv_head,
           "head_dim": cfg.head_dim, "max_position_embeddings": cfg.max_seq_len,
           "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu", "attention_bias": False,
           "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta,
                               "partial_rotary_factor": cfg.partial_rotary_factor},
           "tie_word_embeddings": cfg.tie_embeddings, "layer_types": list(cfg.layer_types()),
           "linear_conv_kernel_dim": cfg.conv_width,
           "linear_key_head_dim": cfg.linear_k_head_dim,
           "linear_value_head_dim": cfg.linear_v_head_dim,
           "linear_num_key_heads": cfg.linear_k_heads,
           "linear_num_value_heads": cfg.linear_v_heads, "dtype": "float32"}
    if model_type is QWEN3_NEXT:
        out.update(num_experts=cfg.n_experts, num_experts_per_tok=cfg.experts_per_token,
                   moe_intermediate_size=cfg.expert_d_ff,
                   shared_expert_intermediate_size=cfg.shared_d_ff,
                   norm_topk_prob=cfg.norm_topk_prob, decoder_sparse_step=cfg.sparse_step,
                   mlp_only_layers=list(cfg.dense_layers))
    return out


FAMILY = HFFamily("qwen3_next", (QWEN3_NEXT,), to_hf, _names(_NEXT_LINEAR))
FAMILY_3_5 = HFFamily("qwen3_5", (QWEN3_5,), to_hf, _names(_35_LINEAR))
