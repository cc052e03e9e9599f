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

Metadata <-> config.json and the GGUFArch records: io/gguf_names/qwen3_next_meta.py.
"""
from __future__ import annotations

import numpy as np

from glassformer.io.gguf_names.records import Row, plus_one, rename

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
