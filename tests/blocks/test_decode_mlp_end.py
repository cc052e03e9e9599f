"""blocks/decode_step.py with the MLP's end in one call (swiglu_down_norm_rows): a LLaMA whose
w_down lies as a checkpoint loads it (its transpose's rows contiguous, the plan's `down_t`)
decodes the logits and cache of the blocks' own path, on both kernel modules."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.decode_plan import layer_operands
from glassformer.blocks.names import sub_params
from glassformer.models.model import Model
from tests.blocks.test_decode_step import PATHS, kernels_of, make_model, step_logits


def loaded_layout(model: Model) -> Model:
    """The same numbers, every w_down a transposed view of its (out, in) rows, as loaded."""
    params = {key: np.ascontiguousarray(value.T).T if key.endswith("mlp.w_down") else value
              for key, value in model.params.items()}
    return Model(model.cfg, params)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_the_fused_mlp_end_equals_the_blocks(monkeypatch, path, name):
    model = loaded_layout(make_model(name, packed=True))
    assert layer_operands(sub_params(model.params, "blocks.1.")).down_t is not None
    calls = []
    kernels = kernels_of(path)
    fused = kernels.swiglu_down_norm_rows
    monkeypatch.setattr(kernels, "swiglu_down_norm_rows",
                        lambda *a: calls.append(a[5] is None) or fused(*a))
    ids = np.random.default_rng(3).integers(0, 50, (2, 6))
    mask = np.ones(ids.shape, bool)
    mask[1, :2] = False
    expected, ref_cache = step_logits(model, None, monkeypatch, ids, mask)
    logits, cache = step_logits(model, kernels, monkeypatch, ids, mask)
    assert calls == [False, True]                  # every layer, the last with no next norm
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(cache.k + cache.v, ref_cache.k + ref_cache.v):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)
