"""LoRA adapters inside the blocks: float64 finite differences of the adapters' grads through
attention (joined q|k|v product, GPT-2's fused qkv adapter, cross-attention's separate products)
and the gated MLP; the frozen base takes no gradient; a LoRA model's backward returns the adapters'
grads only; a fresh adapter changes nothing."""
from __future__ import annotations

import math

import numpy as np
import pytest

from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.lora import adapter_constants, adapter_name
from glassformer.blocks.mlp import init_mlp, mlp_backward, mlp_forward
from glassformer.errors import GlassformerError
from glassformer.gradcheck.core import gradcheck
from glassformer.models import llama
from glassformer.ops.lora import init_lora

# Finite differences in float64 agree to ~1e-9 when the backward is right.
GRADCHECK_TOL = 1e-6
R = 2


def _adapters(params: dict, weights: dict, rng) -> dict:
    """Random non-zero adapters {weight: (C_in, C_out)} and their constants, float64."""
    entries = {}
    for weight, (c_in, c_out) in weights.items():
        entries[adapter_name(weight, "lora_A")] = rng.standard_normal((c_in, R))
        entries[adapter_name(weight, "lora_B")] = rng.standard_normal((R, c_out))
        entries.update(adapter_constants(weight, 1.5, 0.0))
    return entries


def _check(forward, backward, inputs, frozen_names):
    """gradcheck of every adapter and x; no base weight may get a grad."""
    _, ctx = forward(inputs)
    grads = backward(np.ones(1), ctx, probe=True)
    assert not set(grads) & set(frozen_names)
    errors = gradcheck(forward, lambda dout, ctx: backward(dout, ctx), inputs)
    assert errors and max(errors.values()) < GRADCHECK_TOL, errors


def _attention_case(weights, *, cross=False, t=4):
    cfg = BlockConfig(d_model=8, n_head=2, n_kv_head=1, position="none" if cross else "rope")
    rng = np.random.default_rng(0)
    base = init_attention(cfg, rng, std=1.0 / math.sqrt(8), out_std=0.3, dtype=np.float64)
    shapes = {"wq": (8, 8), "wk": (8, 4), "wv": (8, 4), "wo": (8, 8), "wqkv": (8, 16)}
    adapters = _adapters(base, {w: shapes[w] for w in weights}, rng)
    inputs = {"x": rng.standard_normal((2, t, 8)), **{k: v for k, v in adapters.items()
                                                      if k.endswith(("lora_A", "lora_B"))}}
    memory = rng.standard_normal((2, 5, 8)) if cross else None
    constants = {k: v for k, v in adapters.items() if k not in inputs}

    def forward(inp):
        params = {**base, **constants, **{k: v for k, v in inp.items() if k != "x"}}
        return attention_block_forward(params, inp["x"], cfg, causal=not cross, memory=memory,
                                       frozen=True)

    def backward(dout, ctx, probe=False):
        if probe:
            dout = np.ones((2, t, 8))
        grads, dx, _ = attention_block_backward(dout, ctx)
        return {**grads, "x": dx}

    return forward, backward, inputs, list(base)


@pytest.mark.parametrize("weights", [("wq", "wv", "wo"), ("wk", "wo"), ("wqkv",)],
                         ids=["q-v-o", "k-o", "fused-qkv"])
def test_attention_adapters_gradcheck_on_the_joined_product(weights):
    _check(*_attention_case(weights))


def test_cross_attention_adapters_gradcheck_on_separate_products():
    _check(*_attention_case(("wq", "wk", "wv", "wo"), cross=True))


def test_fused_adapter_needs_the_joined_product():
    forward, _, inputs, _ = _attention_case(("wqkv",), t=1)
    with pytest.raises(GlassformerError, match="fused q|k|v LoRA adapter"):
        forward(inputs)


def test_mlp_adapters_gradcheck():
    cfg = BlockConfig(d_model=6, n_head=2, d_ff=10, mlp="swiglu")
    rng = np.random.default_rng(1)
    base = init_mlp(cfg, rng, std=0.4, out_std=0.4, dtype=np.float64)
    adapters = _adapters(base, {"w_up": (6, 10), "w_gate": (6, 10), "w_down": (10, 6)}, rng)
    inputs = {"x": rng.standard_normal((2, 3, 6)), **{k: v for k, v in adapters.items()
                                                      if k.endswith(("lora_A", "lora_B"))}}
    constants = {k: v for k, v in adapters.items() if k not in inputs}

    def forward(inp):
        params = {**base, **constants, **{k: v for k, v in inp.items() if k != "x"}}
        return mlp_forward(params, inp["x"], cfg, frozen=True)

    def backward(dout, ctx, probe=False):
        grads, dx = mlp_backward(np.ones((2, 3, 6)) if probe else dout, ctx)
        return {**grads, "x": dx}

    _check(forward, backward, inputs, list(base))


def test_lora_model_trains_its_adapters_only_and_starts_as_the_base():
    cfg = llama.LlamaConfig(vocab_size=11, n_layer=2, n_head=2, d_model=8, max_seq_len=16)
    rng = np.random.default_rng(2)
    params = llama.init_params(cfg, rng)
    adapters = {}
    for i in range(cfg.n_layer):
        for weight, (c_in, c_out) in (("attn.wq", (8, 8)), ("mlp.w_down", (cfg.hidden, 8))):
            a, b = init_lora(c_in, c_out, R, rng)
            adapters[f"blocks.{i}.{weight}.lora_A"] = a
            adapters[f"blocks.{i}.{weight}.lora_B"] = b
            adapters.update(adapter_constants(f"blocks.{i}.{weight}", 2.0, 0.1))
    ids = rng.integers(0, 11, (2, 5))
    logits, _ = llama.forward(params, ids, cfg)
    lora_logits, ctx = llama.forward({**params, **adapters}, ids, cfg, train=True, rng=rng)
    np.testing.assert_array_equal(lora_logits, logits)   # B = 0: the base model exactly
    grads = llama.backward(np.ones_like(lora_logits), ctx)
    assert set(grads) == {k for k in adapters if k.endswith(("lora_A", "lora_B"))}
    assert all(grads[k].dtype == np.float32 for k in grads)
