"""Gradcheck cases for the attention block: causal, padding, cross-attention (dmemory), GQA, MQA,
RoPE at offset positions and per-row positions, ALiBi, q/k/v/out biases on and off, QK-norm per
head (Qwen3) and over the whole projection (OLMoE).

Every parameter is an input under its block-local name ("attn.wq", or "cross.wq" when the keys
come from `memory`), so x, memory and all params are checked. Shapes: B=2, T=3, S=4 (memory),
C=8, and H=4 (D=2) or, for RoPE, H=2 (D=4, so that two frequencies turn each head).
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.names import prefixed, sub_params
from glassformer.gradcheck.cases._block_params import (LEFT_PAD_MASK, LEFT_PAD_POSITIONS,
                                                       WEIGHT_STD, attention_inputs,
                                                       drop_key_bias, key_mask)
from glassformer.gradcheck.core import GradcheckCase

B, T, S, C = 2, 3, 4, 8


def _config(n_head: int = 4, **overrides) -> BlockConfig:
    return BlockConfig(d_model=C, n_head=n_head, **overrides)


def case(mode: str, cfg: BlockConfig, *, causal: bool, cross: bool = False,
         mask: np.ndarray | None = None, positions: np.ndarray | None = None,
         with_key_bias: bool = False) -> GradcheckCase:
    """mask: (B, S) bool key mask, over x's tokens (S = T) or over memory's when cross.

    with_key_bias: also return the key bias's gradient when it is exactly zero (no RoPE), for a
    caller that compares zeros in absolute terms (`glassformer explain mha` does).
    """
    prefix = "cross." if cross else "attn."

    def make(rng):
        params = init_attention(cfg, rng, std=WEIGHT_STD, out_std=WEIGHT_STD, dtype=np.float64)
        x = rng.standard_normal((B, T, C))                              # (B, T, C)
        memory = rng.standard_normal((B, S, C)) if cross else None      # (B, S, C)
        return attention_inputs(params, prefix, rng, x, memory=memory, mask=mask,
                                positions=positions)

    def forward(inp):
        return attention_block_forward(sub_params(inp, prefix), inp["x"], cfg, causal=causal,
                                       memory=inp.get("memory"), key_mask=inp.get("key_mask"),
                                       positions=inp.get("positions"))

    def backward(dy, ctx):
        grads, dx, dmemory = attention_block_backward(dy, ctx)
        checked = {"x": dx, **prefixed(grads, prefix)}
        if dmemory is not None:
            checked["memory"] = dmemory
        return drop_key_bias(checked, keep=with_key_bias or cfg.position == "rope")

    return GradcheckCase("attention_block", mode, make, forward, backward)


CASES = [
    case("causal", _config(), causal=True),
    case("causal-no-bias", _config(qkv_bias=False, out_bias=False), causal=True),
    case("padding", _config(), causal=False, mask=key_mask([3, 2], T)),
    case("causal-padding", _config(), causal=True, mask=key_mask([3, 1], T)),
    case("cross", _config(), causal=False, cross=True, mask=key_mask([4, 2], S)),
    case("cross-no-bias", _config(qkv_bias=False, out_bias=False), causal=False, cross=True),
    case("gqa-2-of-4", _config(n_kv_head=2), causal=True),
    case("mqa", _config(n_kv_head=1), causal=True),
    case("rope-offset", _config(2, position="rope"), causal=True,
         positions=np.arange(3, 3 + T)),
    case("rope-mqa-no-bias", _config(2, n_kv_head=1, position="rope", qkv_bias=False,
                                     out_bias=False), causal=True,
         positions=np.arange(3, 3 + T)),
    case("rope-per-row", _config(2, position="rope"), causal=True,
         mask=LEFT_PAD_MASK, positions=LEFT_PAD_POSITIONS),
    case("alibi", _config(position="alibi"), causal=True),
    case("alibi-gqa", _config(position="alibi", n_kv_head=2), causal=True),
    case("qk-norm-head-gqa-rope", _config(2, n_kv_head=1, position="rope", qkv_bias=False,
                                          qk_norm="head"), causal=True),
    case("qk-norm-proj-gqa-rope", _config(2, n_kv_head=1, position="rope", qkv_bias=False,
                                          qk_norm="proj"), causal=True),
    # today's attention: a window shorter than T, sinks per query head (gpt-oss), Gemma's
    # soft-capped scores with its own scale, (1 + w) QK-norm and a windowed layer's own RoPE base
    case("window-sinks-gqa", _config(n_kv_head=2, position="rope", window=2, attn_sinks=True),
         causal=True, positions=np.arange(3, 3 + T)),
    case("window-left-pad", _config(2, position="rope", window=2, attn_sinks=True),
         causal=True, mask=LEFT_PAD_MASK, positions=LEFT_PAD_POSITIONS),
    case("gemma-softcap", _config(2, n_kv_head=1, position="rope", qkv_bias=False,
                                  out_bias=False, qk_norm="head", norm_offset=1.0, window=2,
                                  local_rope_theta=100.0, attn_scale=0.3, attn_softcap=1.5),
         causal=True),
]
