"""Gradcheck cases for multi-head latent attention (blocks/mla.py): low-rank or plain queries,
padding, per-row RoPE positions, DeepSeek's interleaved RoPE pairs with YaRN and its softmax
mscale.

Every parameter is an input under its block-local name ("attn.wkv_a", "attn.kv_norm.w", ...), so
x and all params are checked. Shapes: B=2, T=3, C=8, H=2, R=4, Rq=6, Dn=3, Dr=4, Dv=2 (odd and
unequal widths, so that a mixed-up split cannot pass).
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig, MLAConfig
from glassformer.blocks.mla import init_mla, mla_block_backward, mla_block_forward
from glassformer.blocks.names import prefixed, sub_params
from glassformer.gradcheck.cases._block_params import (LEFT_PAD_MASK, LEFT_PAD_POSITIONS,
                                                       WEIGHT_STD, attention_inputs, key_mask)
from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.rope_scaling import RopeScaling

B, T, C, H = 2, 3, 8, 2
R, RQ, DN, DR, DV = 4, 6, 3, 4, 2


def mla_config(*, q_lora_rank: int | None = RQ, interleave: bool = False,
               yarn: bool = False) -> BlockConfig:
    """A tiny MLA block config; yarn: YaRN RoPE (factor 4 over 2 positions) and mscale_all_dim 1,
    so that both the tables and the softmax scale change."""
    mla = MLAConfig(kv_lora_rank=R, qk_nope_head_dim=DN, qk_rope_head_dim=DR, v_head_dim=DV,
                    q_lora_rank=q_lora_rank, rope_interleave=interleave,
                    mscale_all_dim=1.0 if yarn else 0.0)
    scaling = RopeScaling("yarn", 4.0, original_max_len=2) if yarn else None
    return BlockConfig(d_model=C, n_head=H, head_dim=DR, norm="rms", position="rope",
                       rope_scaling=scaling, mla=mla)


def case(mode: str, cfg: BlockConfig, *, mask: np.ndarray | None = None,
         positions: np.ndarray | None = None) -> GradcheckCase:
    """mask: (B, T) bool key mask; positions: (T,) or (B, T) RoPE positions."""
    prefix = "attn."

    def make(rng):
        params = init_mla(cfg, rng, std=WEIGHT_STD, out_std=WEIGHT_STD, dtype=np.float64)
        x = rng.standard_normal((B, T, C))                              # (B, T, C)
        return attention_inputs(params, prefix, rng, x, mask=mask, positions=positions)

    def forward(inp):
        return mla_block_forward(sub_params(inp, prefix), inp["x"], cfg, causal=True,
                                 key_mask=inp.get("key_mask"), positions=inp.get("positions"))

    def backward(dy, ctx):
        grads, dx = mla_block_backward(dy, ctx)
        return {"x": dx, **prefixed(grads, prefix)}

    return GradcheckCase("mla", mode, make, forward, backward)


CASES = [
    case("q-lora", mla_config()),
    case("plain-q", mla_config(q_lora_rank=None)),
    case("offset", mla_config(), positions=np.arange(5, 5 + T)),
    case("padding", mla_config(), mask=key_mask([3, 2], T)),
    case("per-row", mla_config(), mask=LEFT_PAD_MASK, positions=LEFT_PAD_POSITIONS),
    case("interleave-yarn", mla_config(interleave=True, yarn=True),
         positions=np.arange(2, 2 + T)),
]
