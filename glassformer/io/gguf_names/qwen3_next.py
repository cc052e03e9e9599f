"""Qwen3-Next (general.architecture qwen3next) and Qwen3.5 (qwen35) in llama.cpp's GGUF names.

What convert_hf_to_gguf.py does to these hybrids, and so what is undone here (HF -> GGUF):

    A_log (Hv,)                   ssm_a = -exp(A_log)           (A itself, not its log)
    dt_bias (Hv,)                 ssm_dt.bias
    conv1d.weight (Dc, 1, W)      ssm_conv1d (Dc, W)            (the 1 squeezed out)
    linear_attn.norm (Dv,)        ssm_norm                      (plain gain: no +1)
    every other RMSNorm (w)       +1: llama.cpp stores the gain 1 + w
    Qwen3-Next in_proj_qkvz       attn_qkv [all q | all k | all v] and attn_gate [all z]
      (per key head: q k v z)     (HF joins them per key head; llama.cpp per part)
    Qwen3-Next in_proj_ba         ssm_ba, as stored
    Qwen3.5 in_proj_qkv / _z      attn_qkv / attn_gate;  in_proj_b / _a: ssm_beta / ssm_alpha
    full attention q_proj         attn_q, as stored (q and its gate, per head)

Qwen3.5 only, when Hv > Hk: llama.cpp reorders the value heads from HF's grouped order (the G
value heads of key head 0, then of key head 1, ...) to a tiled one (value head 0 of every key
head, then value head 1 ...), so that ggml broadcasts key heads by repeating them. Every tensor
with a value-head axis is reordered: v's rows of attn_qkv and its conv channels, attn_gate,
ssm_beta, ssm_alpha, ssm_a, ssm_dt, and ssm_out's columns. `_tiled` / `_grouped` do and undo it.

Metadata: llama.cpp keeps the hybrid's shape in {arch}.ssm.* (conv_kernel = W, state_size = Dk,
group_count = Hk, time_step_rank = Hv, inner_size = Hv Dv) and the layer pattern in
full_attention_interval (layer i is full when (i + 1) % interval == 0), so a config whose
layer_types break that rhythm has no GGUF form. Partial RoPE is rope.dimension_count.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.gguf_names.records import GGUFArch, Row, plus_one, rename

_LIN, _ATTN, _MLP = "layers.{i}.linear_attn.", "layers.{i}.self_attn.", "layers.{i}.mlp."
_PARTS = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}


# ------------------------------------------------------------ value-head order (Qwen3.5)
def _tiled(x: np.ndarray, axis: int, cfg: dict, width: int) -> np.ndarray:
    """HF's grouped value heads -> llama.cpp's tiled order along `axis` (Hv * width long)."""
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(hk, hv // hk, width, *rest).swapaxes(0, 1)       # (Hk, G, w) -> (G, Hk, w)
    return np.moveaxis(x.reshape(hv * width, *rest), 0, axis)


def _grouped(x: np.ndarray, axis: int, cfg: dict, width: int) -> np.ndarray:
    """The inverse of _tiled."""
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(hv // hk, hk, width, *rest).swapaxes(0, 1)       # (G, Hk, w) -> (Hk, G, w)
    return np.moveaxis(x.reshape(hv * width, *rest), 0, axis)


def _v_rows(cfg: dict, tiled: bool, width: int, start: int = 0, axis: int = 0):
    """A function reordering the value-head part (from `start` on `axis`) of an array, or none
    when llama.cpp keeps HF's order (Qwen3-Next, or Hv == Hk)."""
    if not tiled or cfg["linear_num_key_heads"] == cfg["linear_num_value_heads"]:
        return lambda x, back=False: x

    def reorder(x: np.ndarray, back: bool = False) -> np.ndarray:
        head, tail = np.split(x, [start], axis=axis)
        tail = (_grouped if back else _tiled)(tail, axis, cfg, width)
        return np.concatenate([head, tail], axis=axis)
    return reorder


# ------------------------------------------------------------ the Gated DeltaNet rows
def _qk_width(cfg: dict) -> int:
    return cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]


def _one(gguf: str, hf: str, need: str, reorder) -> Row:
    """A one-to-one row through a value-head reorder (reorder(x) on save, back=True on load)."""
    return Row((gguf,), (hf,), need, load=lambda c, w: (reorder(w, back=True),),
               save=lambda c, w: (reorder(w),))


def _a_log(a: np.ndarray) -> np.ndarray:
    """A_log from ssm_a = -exp(A_log); an A that is not negative gives NaN or inf, which the
    loader's finiteness check names (io/gguf_hf.py)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(-a)


def _linear_rows(cfg: dict, i: int, tiled: bool) -> list[Row]:
    """One linear_attention layer's rows (Qwen3.5's names when `tiled`, else Qwen3-Next's)."""
    blk, lin = f"blk.{i}.", _LIN.format(i=i)
    dv, qk = cfg["linear_value_head_dim"], _qk_width(cfg)
    per_head = _v_rows(cfg, tiled, 1)
    conv = _v_rows(cfg, tiled, dv, start=2 * qk)
    rows = [
        Row((blk + "ssm_a",), (lin + "A_log",), "A = -exp(A_log), one per value head",
            load=lambda c, a: (_a_log(per_head(a, back=True)),),
            save=lambda c, a_log: (per_head(-np.exp(a_log)),)),
        _one(blk + "ssm_dt.bias", lin + "dt_bias", "the time-step bias, one per value head",
             per_head),
        Row((blk + "ssm_conv1d.weight",), (lin + "conv1d.weight",),
            "the short causal conv's taps (channels, conv_kernel)",
            load=lambda c, w: (conv(w, back=True)[:, None, :],),
            save=lambda c, w: (conv(w[:, 0, :]),)),
        rename(blk + "ssm_norm.weight", lin + "norm.weight", "the gated RMSNorm's gain"),
        _one(blk + "ssm_out.weight", lin + "out_proj.weight", "the output projection",
             _v_rows(cfg, tiled, dv, axis=1))]
    if tiled:   # Qwen3.5: four plain projections
        rows += [
            _one(blk + "attn_qkv.weight", lin + "in_proj_qkv.weight", "q, k and v joined", conv),
            _one(blk + "attn_gate.weight", lin + "in_proj_z.weight", "the output gate z",
                 _v_rows(cfg, True, dv)),
            _one(blk + "ssm_beta.weight", lin + "in_proj_b.weight", "beta's projection",
                 per_head),
            _one(blk + "ssm_alpha.weight", lin + "in_proj_a.weight", "alpha's projection",
                 per_head)]
    else:       # Qwen3-Next: qkvz joined per key head in HF, per part in GGUF
        rows += [
            Row((blk + "attn_qkv.weight", blk + "attn_gate.weight"), (lin + "in_proj_qkvz.weight",),
                "q, k and v joined, and the output gate z",
                load=lambda c, qkv, z: (qkvz_from_parts(c, qkv, z),),
                save=lambda c, w: qkvz_to_parts(c, w)),
            rename(blk + "ssm_ba.weight", lin + "in_proj_ba.weight",
                   "beta's and alpha's projections, per key head")]
    return rows


def _qkvz_widths(cfg: dict) -> list[int]:
    g = cfg["linear_num_value_heads"] // cfg["linear_num_key_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    return [dk, dk, g * dv, g * dv]


def qkvz_to_parts(cfg: dict, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HF's in_proj_qkvz (Hk [q k v z], C) -> (attn_qkv [q.. | k.. | v..], attn_gate [z..])."""
    hk, c = cfg["linear_num_key_heads"], w.shape[1]
    bounds = np.cumsum(_qkvz_widths(cfg))[:-1]
    q, k, v, z = np.split(w.reshape(hk, -1, c), bounds, axis=1)          # each (Hk, width, C)
    return (np.concatenate([p.reshape(-1, c) for p in (q, k, v)]), z.reshape(-1, c))


def qkvz_from_parts(cfg: dict, qkv: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The inverse of qkvz_to_parts: (attn_qkv, attn_gate) -> HF's in_proj_qkvz."""
    hk, c = cfg["linear_num_key_heads"], qkv.shape[1]
    qk = _qk_width(cfg)
    q, k, v = np.split(qkv, [qk, 2 * qk])
    parts = [p.reshape(hk, -1, c) for p in (q, k, v, z)]                 # (Hk, width, C)
    return np.concatenate(parts, axis=1).reshape(-1, c)


# ------------------------------------------------------------ the other rows
def _attention_rows(i: int) -> list[Row]:
    blk, attn = f"blk.{i}.", _ATTN.format(i=i)
    return [rename(blk + "attn_q.weight", attn + "q_proj.weight", "q and its gate, per head"),
            rename(blk + "attn_k.weight", attn + "k_proj.weight", "the key projection"),
            rename(blk + "attn_v.weight", attn + "v_proj.weight", "the value projection"),
            rename(blk + "attn_output.weight", attn + "o_proj.weight", "the output projection"),
            plus_one(blk + "attn_q_norm.weight", attn + "q_norm.weight", "q's RMSNorm gain"),
            plus_one(blk + "attn_k_norm.weight", attn + "k_norm.weight", "k's RMSNorm gain")]


def _mlp_rows(cfg: dict, i: int) -> list[Row]:
    blk, mlp = f"blk.{i}.", _MLP.format(i=i)
    rows = [rename(f"{blk}ffn_{ours}.weight", f"{mlp}{theirs}.weight", f"the MLP's {ours}")
            for ours, theirs in _PARTS.items()]
    n_experts = int(cfg.get("num_experts") or 0)
    if n_experts:
        rows.append(rename(blk + "ffn_gate_inp.weight", mlp + "gate.weight", "the router"))
        for ours, theirs in _PARTS.items():
            keys = tuple(f"{mlp}experts.{e}.{theirs}.weight" for e in range(n_experts))
            rows.append(Row((f"{blk}ffn_{ours}_exps.weight",), keys, f"every expert's {ours}",
                            load=lambda c, w: tuple(w), save=lambda c, *ws: (np.stack(ws),)))
            rows.append(rename(f"{blk}ffn_{ours}_shexp.weight",
                               f"{mlp}shared_expert.{theirs}.weight", f"the shared {ours}"))
        rows.append(rename(blk + "ffn_gate_inp_shexp.weight", mlp + "shared_expert_gate.weight",
                           "the shared expert's gate"))
    return rows


def rows(cfg: dict, tiled: bool) -> list[Row]:
    """Every row a model of this config.json may hold (io/gguf_hf.py keeps those whose HF keys
    the model has)."""
    out = [rename("token_embd.weight", "embed_tokens.weight", "the token embedding"),
           rename("output.weight", "lm_head.weight", "the LM head"),
           plus_one("output_norm.weight", "norm.weight", "the final RMSNorm gain")]
    for i in range(cfg["num_hidden_layers"]):
        out += [plus_one(f"blk.{i}.attn_norm.weight", f"layers.{i}.input_layernorm.weight",
                         "the mixer's RMSNorm gain"),
                plus_one(f"blk.{i}.post_attention_norm.weight",
                         f"layers.{i}.post_attention_layernorm.weight",
                         "the MLP's RMSNorm gain")]
        out += _linear_rows(cfg, i, tiled) + _attention_rows(i) + _mlp_rows(cfg, i)
    return out


# ------------------------------------------------------------ metadata <-> config.json
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
    out = {"context_length": hf["max_position_embeddings"], "vocab_size": hf["vocab_size"],
           "embedding_length": hf["hidden_size"], "block_count": hf["num_hidden_layers"],
           "feed_forward_length": hf["intermediate_size"],
           "attention.head_count": hf["num_attention_heads"],
           "attention.head_count_kv": hf["num_key_value_heads"],
           "attention.key_length": hf["head_dim"], "attention.value_length": hf["head_dim"],
           "attention.layer_norm_rms_epsilon": float(hf["rms_norm_eps"]),
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
