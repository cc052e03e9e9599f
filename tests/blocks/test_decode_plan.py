"""blocks/decode_plan.py: the fused decoded step gathers its operands once per cache, reuses them
while the params are the same arrays, and gathers them again when a weight is replaced."""
from __future__ import annotations

import numpy as np

import glassformer.models.common as common
from glassformer.blocks.decode_plan import cached_plan, decode_plan, params_key
from glassformer.kernels import decode_numpy
from glassformer.models import llama
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model


def small_model(packed: bool) -> Model:
    cfg = llama.LlamaConfig(vocab_size=50, max_seq_len=32, n_layer=2, n_head=4, n_kv_head=2,
                            d_model=32)
    params = llama.init_params(cfg, np.random.default_rng(0))
    if packed:
        lay_out_for_decoding(params)
    return Model(cfg, params)


def decode(model: Model, cache, ids: np.ndarray) -> np.ndarray:
    """One forward of ids (1, T) into the cache (advanced after): the last logits (V,)."""
    logits, _ = model.forward(ids, kv_cache=cache, last_only=True)
    cache.advance(ids.shape[1])
    return logits[0, -1]


def test_the_plan_is_gathered_once_and_reused(monkeypatch):
    monkeypatch.setattr(common, "decode_kernels", lambda: decode_numpy)
    model = small_model(packed=True)
    cache = model.new_cache(1, 8)
    decode(model, cache, np.array([[1, 2, 3]]))           # prefill: no fused step, no plan
    assert cache.decode_plan is None
    decode(model, cache, np.array([[4]]))
    plan = cache.decode_plan
    assert plan is not None and cached_plan(model.params, cache) is plan
    assert all(layer.qkv is not None and layer.gate_up is not None for layer in plan.layers)
    decode(model, cache, np.array([[5]]))
    assert cache.decode_plan is plan                      # the same params: reused


def test_a_replaced_weight_gathers_a_new_plan(monkeypatch):
    monkeypatch.setattr(common, "decode_kernels", lambda: decode_numpy)
    model = small_model(packed=False)
    prompt = np.array([[1, 2, 3]])
    cache = model.new_cache(1, 8)
    decode(model, cache, prompt)
    decode(model, cache, np.array([[4]]))
    first = cache.decode_plan
    assert all(layer.qkv is None and layer.gate_up is None for layer in first.layers)
    model.params["blocks.1.mlp.w_down"] = model.params["blocks.1.mlp.w_down"] * 2.0
    changed = decode(model, cache, np.array([[5]]))
    assert cache.decode_plan is not first
    assert cache.decode_plan.layers[1].w_down is model.params["blocks.1.mlp.w_down"]
    # the same step on the ordinary path (the blocks) with the new weight: the same logits
    monkeypatch.setattr(common, "decode_kernels", lambda: None)
    fresh = model.new_cache(1, 8)
    decode(model, fresh, prompt)
    decode(model, fresh, np.array([[4]]))
    np.testing.assert_allclose(changed, decode(model, fresh, np.array([[5]])), rtol=1e-4,
                               atol=1e-5)


def test_the_key_tells_names_and_arrays():
    params = {"a": np.zeros(2), "b": np.ones(2)}
    key = params_key(params)
    assert params_key(dict(params)) == key
    assert params_key({"a": params["a"], "c": params["b"]}) != key
    assert params_key({**params, "b": params["b"].copy()}) != key
    layers = common.split_layers(small_model(packed=False).params, 2)
    assert decode_plan({}, layers).frozen is False
