"""Gradcheck cases for Qwen3-Next's two token mixers: the Gated DeltaNet block (grouped value
heads, left padding, a prompt over two chunks) and full attention with an output gate (grouped
KV heads, partial RoPE, padding). Every weight and x are checked."""
from __future__ import annotations

import numpy as np

from glassformer.blocks.gated_attention import (gated_attention_backward,
                                                gated_attention_forward, gated_attention_shapes)
from glassformer.blocks.gated_delta import (GatedDeltaConfig, gated_delta_backward,
                                            gated_delta_forward, gated_delta_shapes)
from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.rope import rope_tables_at

DELTA = GatedDeltaConfig(d_model=5, k_heads=1, v_heads=2, k_head_dim=3, v_head_dim=2,
                         conv_width=3, chunk_size=4)
HEADS, KV_HEADS, HEAD_DIM, ROTARY = 2, 1, 4, 2


def _mask(b: int, t: int) -> np.ndarray:
    mask = np.ones((b, t), bool)
    mask[-1, :2] = False            # the last row left-padded by two
    return mask


def _delta_case():
    def make(rng):
        inp = {"x": rng.standard_normal((2, 6, DELTA.d_model))}
        for name, shape in gated_delta_shapes(DELTA).items():
            inp[name] = rng.standard_normal(shape) * 0.5
        inp["a_log"] = np.log(rng.uniform(0.5, 2.0, DELTA.v_heads))
        inp["mask"] = _mask(2, 6)
        return inp

    def forward(inp):
        params = {k: v for k, v in inp.items() if k not in ("x", "mask")}
        return gated_delta_forward(params, inp["x"], DELTA, key_mask=inp["mask"])

    def backward(dout, ctx):
        grads, dx = gated_delta_backward(dout, ctx)
        return {"x": dx, **grads}

    return GradcheckCase("gated_delta_block", "grouped-padded-2-chunks", make, forward, backward)


def _attention_case():
    def make(rng):
        inp = {"x": rng.standard_normal((2, 5, 6))}
        for name, shape in gated_attention_shapes(6, HEADS, KV_HEADS, HEAD_DIM).items():
            inp[name] = rng.standard_normal(shape) * 0.5
        inp["mask"] = _mask(2, 5)
        return inp

    def forward(inp):
        params = {k: v for k, v in inp.items() if k not in ("x", "mask")}
        tables = rope_tables_at(np.arange(5), ROTARY, theta=100.0, dtype=np.float64)
        return gated_attention_forward(params, inp["x"], n_head=HEADS, n_kv=KV_HEADS, eps=1e-6,
                                       rope_tables=tables, key_mask=inp["mask"])

    def backward(dout, ctx):
        grads, dx = gated_attention_backward(dout, ctx)
        return {"x": dx, **grads}

    return GradcheckCase("gated_attention_block", "gqa-partial-rope-padded", make, forward,
                         backward)


CASES = [_delta_case(), _attention_case()]
