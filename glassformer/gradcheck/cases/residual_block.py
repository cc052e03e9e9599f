"""Gradcheck cases for the residual block (one Transformer layer), one per family arrangement:

    gpt2       pre-norm LayerNorm, causal, GELU (tanh), biases everywhere
    gpt2-dropout  the same with residual dropout (p=0.25, a fixed mask: see _case)
    nanogpt-no-bias  pre-norm LayerNorm without any bias (norm_bias, qkv/out/mlp biases off)
    llama      pre-norm RMSNorm, SwiGLU, RoPE at offset positions, GQA (2 KV heads for 4), no bias
    bert       post-norm LayerNorm, bidirectional with a padding mask, GELU (erf)
    gemma3     pre_post (four RMSNorms, (1 + w) gains), GeGLU, QK-norm, a window of 2 < T with
               its own RoPE base, Gemma's score scale and soft cap, GQA
    decoder    post-norm LayerNorm, causal self-attention, cross-attention over `memory` with a
               memory padding mask, ReLU: the original Transformer's decoder layer (dmemory checked)

Every parameter is an input under its block-local name ("norm1.w", "attn.wq", "cross.wk",
"mlp.w_up", ...), so x, memory and all params are checked. Shapes: B=2, T=3, S=4, C=8, F=16,
H=2 (D=4), or H=4 (D=2) for LLaMA's grouped heads (RoPE at D=4 is checked in attention_block).
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.residual import block_backward, block_forward, init_block
from glassformer.gradcheck.cases._block_params import (WEIGHT_STD, drop_key_bias, exercised,
                                                       key_mask)
from glassformer.gradcheck.core import GradcheckCase

B, T, S, F = 2, 3, 4, 16
_NO_BIAS = dict(qkv_bias=False, out_bias=False, mlp_bias=False)
# GPT-2's layer beyond its sizes: pre-norm LayerNorm (the default) and tanh GELU; biases on.
# `glassformer explain block` builds its layer from the same flags.
GPT2_LAYER = dict(mlp="gelu_tanh")
# The dropout case reseeds its mask generator on every forward, so the + and - nudges of central
# differences see the same mask, as one training step does.
_DROPOUT_SEED = 1234


def case(mode: str, cfg: BlockConfig, *, causal: bool, cross: bool = False,
         mask: np.ndarray | None = None, memory_mask: np.ndarray | None = None,
         positions: np.ndarray | None = None, with_key_bias: bool = False) -> GradcheckCase:
    """One layer in `cfg`'s arrangement; with_key_bias as in attention_block.case (explain's
    `block` part compares the key bias's exactly-zero gradient in absolute terms)."""
    c = cfg.d_model
    train = cfg.dropout > 0.0

    def make(rng):
        params = init_block(cfg, rng, std=WEIGHT_STD, out_std=WEIGHT_STD, cross=cross,
                            dtype=np.float64)
        inputs = {"x": rng.standard_normal((B, T, c))}                  # (B, T, C)
        if cross:
            inputs["memory"] = rng.standard_normal((B, S, c))           # (B, S, C)
        inputs.update(exercised(params, rng))
        return inputs

    def forward(inp):
        params = {name: value for name, value in inp.items() if name not in ("x", "memory")}
        rng = np.random.default_rng(_DROPOUT_SEED) if train else None
        return block_forward(params, inp["x"], cfg, causal=causal, key_mask=mask,
                             positions=positions, memory=inp.get("memory"),
                             memory_mask=memory_mask, train=train, rng=rng)

    def backward(dout, ctx):
        grads, dx, dmemory = block_backward(dout, ctx)
        checked = {"x": dx, **grads}
        if dmemory is not None:
            checked["memory"] = dmemory
        return drop_key_bias(checked, keep=with_key_bias or cfg.position == "rope")

    return GradcheckCase("residual_block", mode, make, forward, backward)


def _config(**overrides) -> BlockConfig:
    return BlockConfig(**{"d_model": 8, "n_head": 2, "d_ff": F, **overrides})


CASES = [
    case("gpt2", _config(**GPT2_LAYER), causal=True),
    case("gpt2-dropout", _config(**GPT2_LAYER, dropout=0.25), causal=True),
    case("nanogpt-no-bias", _config(**GPT2_LAYER, norm_bias=False, **_NO_BIAS), causal=True),
    case("llama", _config(n_head=4, n_kv_head=2, norm="rms", mlp="swiglu", position="rope",
                          **_NO_BIAS),
         causal=True, positions=np.arange(3, 3 + T)),
    case("gemma3", _config(n_head=4, n_kv_head=2, norm="rms", norm_position="pre_post",
                           norm_offset=1.0, mlp="geglu_tanh", position="rope", qk_norm="head",
                           window=2, local_rope_theta=100.0, attn_scale=0.4, attn_softcap=2.0,
                           **_NO_BIAS),
         causal=True, positions=np.arange(3, 3 + T)),
    case("bert", _config(norm_position="post", mlp="gelu"), causal=False,
         mask=key_mask([3, 2], T)),
    case("decoder", _config(norm_position="post", mlp="relu"), causal=True, cross=True,
         memory_mask=key_mask([4, 2], S)),
]
