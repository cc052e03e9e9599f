"""blocks/decode_step.py with a layer's two ends fused (kernels/: attend_out_norm_rows where wo is
row-major, swiglu_down_norm_rows where w_down lies as a checkpoint loads it): the logits and cache
of the blocks' own path, on both kernel modules, each fusion on or off."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.decode_plan import layer_operands
from glassformer.blocks.names import sub_params
from glassformer.models.model import Model
from tests.blocks.test_decode_step import PATHS, kernels_of, make_model, step_logits


def relaid(model: Model, suffixes: tuple[str, ...]) -> Model:
    """The same numbers, each weight ending in one of `suffixes` a transposed view of its
    (out, in) rows, as a checkpoint loads it."""
    params = {key: np.ascontiguousarray(value.T).T if key.endswith(suffixes) else value
              for key, value in model.params.items()}
    return Model(model.cfg, params)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("fused_ends", ["both", "neither"])
def test_the_fused_ends_equal_the_blocks(monkeypatch, path, name, fused_ends):
    both = fused_ends == "both"
    model = relaid(make_model(name, packed=True), ("mlp.w_down",) if both else ("attn.wo",))
    ops = layer_operands(sub_params(model.params, "blocks.1."))
    assert (ops.wo_rows is not None) == both and (ops.down_t is not None) == both
    calls = []
    kernels = kernels_of(path)
    for kernel in ("swiglu_down_norm_rows", "attend_out_norm_rows"):
        fused = getattr(kernels, kernel)
        monkeypatch.setattr(kernels, kernel, lambda *a, fused=fused, kernel=kernel:
                            calls.append(kernel) or fused(*a))
    ids = np.random.default_rng(3).integers(0, 50, (2, 6))
    mask = np.ones(ids.shape, bool)
    mask[1, :2] = False
    expected, ref_cache = step_logits(model, None, monkeypatch, ids, mask)
    logits, cache = step_logits(model, kernels, monkeypatch, ids, mask)
    swiglu = both and name != "gpt2"               # GPT-2's GELU MLP keeps its three calls
    assert calls == (["attend_out_norm_rows"] * both + ["swiglu_down_norm_rows"] * swiglu) * 2
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(cache.k + cache.v, ref_cache.k + ref_cache.v):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)
