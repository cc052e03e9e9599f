"""Qwen3-Next's token mixers as blocks: gradcheck of both (every weight and x), Gated DeltaNet's
decoding with a state equal to its prefill, a forward with a state refusing backward, and the
shape functions listing what init makes."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.delta_state import DeltaStateLayout, LayerState
from glassformer.blocks.gated_delta import (GatedDeltaConfig, gated_delta_backward,
                                            gated_delta_forward, gated_delta_shapes,
                                            init_gated_delta)
from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.gated_delta_block import CASES

GRADCHECK_TOL = 1e-6
CFG = GatedDeltaConfig(d_model=8, k_heads=2, v_heads=4, k_head_dim=3, v_head_dim=2,
                       conv_width=4, chunk_size=4)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _state(batch: int) -> LayerState:
    layout = DeltaStateLayout(conv_dim=CFG.conv_dim, conv_width=CFG.conv_width,
                              v_heads=CFG.v_heads, k_head_dim=CFG.k_head_dim,
                              v_head_dim=CFG.v_head_dim)
    return LayerState.zeros(layout, batch, np.float64)


def test_decoding_with_a_state_equals_one_prefill():
    rng = np.random.default_rng(0)
    params = {k: v.astype(np.float64) for k, v in init_gated_delta(
        CFG, rng, std=0.3, out_std=0.3).items()}
    x = rng.standard_normal((2, 9, 8))
    whole, _ = gated_delta_forward(params, x, CFG)
    state = _state(2)
    parts = [gated_delta_forward(params, x[:, :5], CFG, state=state)[0]]
    for t in range(5, 9):
        parts.append(gated_delta_forward(params, x[:, t:t + 1], CFG, state=state)[0])
    np.testing.assert_allclose(np.concatenate(parts, axis=1), whole, atol=1e-12)
    _, ctx = gated_delta_forward(params, x[:, :1], CFG, state=_state(2))
    with pytest.raises(GlassformerError, match="inference only"):
        gated_delta_backward(np.ones((2, 1, 8)), ctx)


def test_shapes_list_what_init_makes():
    params = init_gated_delta(CFG, np.random.default_rng(0), std=0.02, out_std=0.01)
    assert list(params) == list(gated_delta_shapes(CFG))
    assert {k: v.shape for k, v in params.items()} == gated_delta_shapes(CFG)


def test_value_heads_must_group_key_heads():
    with pytest.raises(GlassformerError, match="multiple of linear_num_key_heads"):
        GatedDeltaConfig(d_model=8, k_heads=3, v_heads=4, k_head_dim=2, v_head_dim=2)
