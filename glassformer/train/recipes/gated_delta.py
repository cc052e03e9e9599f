"""`train --arch llama --attention gated-delta --full-every K`: the recipe's LLaMA shape as a
Qwen3.5-style hybrid (models/qwen3_5.py). Layers K-1, 2K-1, ... keep full attention (gated, with
QK-norm), every other layer is Gated DeltaNet: a recurrent (Dk, Dv) state per value head written
by the delta rule (ops/delta_rule_chunked.py), so decoding keeps a fixed state there instead of a
growing KV cache. Qwen3.5's own pattern is K=4 (three linear layers, then one full).

Widths from the LLaMA settings (L, H, C), in Qwen3.5's proportions:

    full attention    H query heads, K_v = --n-kv-head (default H) heads, D = C / H,
                      RoPE on a quarter of D (partial_rotary_factor 0.25)
    Gated DeltaNet    Hk = H / 2 key heads (H when H is odd), Hv = H value heads, Dk = Dv = C / H, conv of 4 taps
    MLP               SwiGLU of the dense --arch llama's width (8 C / 3 rounded up to 8)

A run trains with the hand-written backward of every part and exports as Qwen3_5ForCausalLM.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.models.llama import LlamaConfig

FULL_EVERY = 4      # Qwen3.5: one full-attention layer in four


def full_layers(n_layer: int, every: int) -> tuple[int, ...]:
    """The full-attention layers of an L-layer hybrid with one in every `every`: the last of
    each group of `every` (transformers' layer_types: linear, linear, linear, full, ...)."""
    return tuple(range(every - 1, n_layer, every))


def gated_delta_model(model: dict) -> dict:
    """The model settings of a --arch llama recipe as a qwen3_5 hybrid (module docstring)."""
    if model["arch"] != "llama":
        raise GlassformerError(f"--attention gated-delta needs --arch llama (its shape becomes "
                               f"a Qwen3.5 hybrid), got --arch {model['arch']}")
    every = FULL_EVERY if model.get("full_every") is None else model["full_every"]
    layers, heads, width = model["n_layer"], model["n_head"], model["d_model"]
    if not 1 <= every <= layers:
        raise GlassformerError(f"--full-every must be between 1 and --n-layer={layers} (one "
                               f"full-attention layer in K), got {every}")
    if model.get("dropout"):
        raise GlassformerError(f"--attention gated-delta trains without dropout, got --dropout "
                               f"{model['dropout']}")
    if width % heads or (width // heads) % 2:
        raise GlassformerError(f"--d-model {width} must split into --n-head {heads} heads of an "
                               f"even width")
    dim = width // heads
    hidden = LlamaConfig(d_model=width, n_head=heads).hidden
    k_heads = heads // 2 if heads % 2 == 0 else heads    # Hv must be a multiple of Hk
    return {**model, "arch": "qwen3_5", "full_every": every,
            "full_layers": full_layers(layers, every), "head_dim": dim, "d_ff": hidden,
            "linear_k_heads": k_heads, "linear_v_heads": heads,
            "linear_k_head_dim": dim, "linear_v_head_dim": dim}
