"""Tiled attention: gradcheck rows (float64), and equal to ops/attention.py's forward and
backward in float32 (<= 1e-5) with every option, for tile sizes that do and do not divide T, S."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases import tiled_attention as cases
from glassformer.ops.attention import attention_backward, attention_forward
from glassformer.ops.position import alibi_bias
from glassformer.ops.tiled_attention import (tiled_attention_backward, tiled_attention_forward,
                                             tiles)


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck_rows(case):
    result = run_case(case)
    assert result.max_rel_err < 1e-6, result.per_input


def _inputs(rng, lead_q, lead_kv, t, s, d=16, dv=8):
    q = rng.standard_normal(lead_q + (t, d)).astype(np.float32)
    k = rng.standard_normal(lead_kv + (s, d)).astype(np.float32)
    v = rng.standard_normal(lead_kv + (s, dv)).astype(np.float32)
    return q, k, v


OPTIONS = {
    "plain": {},
    "causal": {"causal": True},
    "window": {"causal": True, "window": 37},
    "softcap": {"causal": True, "softcap": 5.0},
    "sinks": {"causal": True, "sinks": True},
    "everything": {"causal": True, "window": 50, "softcap": 8.0, "sinks": True, "mask": True},
    "alibi": {"causal": True, "bias": True},
}


@pytest.mark.parametrize("name", OPTIONS)
@pytest.mark.parametrize("t, s", [(200, 200), (70, 230), (1, 90)])
@pytest.mark.parametrize("query_tile, key_tile", [(64, 48), (256, 512)])
def test_float32_equals_the_whole_op(name, t, s, query_tile, key_tile):
    rng = np.random.default_rng(t + s)
    lead_q, lead_kv = (2, 2, 3), (2, 2, 1)                     # B=2, K=2, G=3: grouped heads
    q, k, v = _inputs(rng, lead_q, lead_kv, t, s)
    kw = dict(OPTIONS[name])
    if kw.pop("sinks", False):
        kw["sinks"] = rng.standard_normal((2, 3, 1, 1)).astype(np.float32)   # (K, G, 1, 1)
    if kw.pop("mask", False):
        kw["mask"] = (rng.random((2, 1, 1, 1, s)) > 0.2)       # (B, 1, 1, 1, S) padding
    if kw.pop("bias", False):
        kw["bias"] = alibi_bias(6, t, s, dtype=np.float32).reshape(2, 3, t, s)
    want, whole = attention_forward(q, k, v, **kw)
    got, tiled = tiled_attention_forward(q, k, v, query_tile=query_tile, key_tile=key_tile, **kw)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert got.dtype == np.float32 and tiled.lse.shape == q.shape[:-1] + (1,)
    dout = rng.standard_normal(want.shape).astype(np.float32)
    grads = tiled_attention_backward(dout, tiled, query_tile=key_tile, key_tile=query_tile)
    for mine, theirs in zip(grads, attention_backward(dout, whole), strict=True):
        assert mine.shape == theirs.shape and mine.dtype == np.float32
        np.testing.assert_allclose(mine, theirs, atol=1e-5 * max(1.0, np.abs(theirs).max()))


def test_causal_tiles_skip_the_upper_triangle_and_the_window_the_far_past():
    plan = tiles(8, 8, causal=True, window=None, query_tile=4, key_tile=2)
    assert [[(tile.k0, tile.k1) for tile in row] for _, _, row in plan] == [
        [(0, 2), (2, 4)], [(0, 2), (2, 4), (4, 6), (6, 8)]]
    plan = tiles(8, 8, causal=True, window=2, query_tile=4, key_tile=2)
    assert [[(tile.k0, tile.k1) for tile in row] for _, _, row in plan] == [
        [(0, 2), (2, 4)], [(3, 5), (5, 7), (7, 8)]]


def test_a_query_with_no_key_outputs_zeros():
    rng = np.random.default_rng(0)
    q, k, v = _inputs(rng, (1, 2), (1, 2), 6, 3)               # causal S < T: 3 rows see none
    out, ctx = tiled_attention_forward(q, k, v, causal=True, query_tile=2, key_tile=2)
    assert np.all(out[..., :3, :] == 0) and np.all(np.isinf(ctx.lse[..., :3, :]))
    dq, dk, dv = tiled_attention_backward(np.ones_like(out), ctx)
    assert np.all(dq[..., :3, :] == 0) and np.isfinite(dk).all() and np.isfinite(dv).all()


@pytest.mark.parametrize("kwargs, words", [
    ({"window": 0, "causal": True}, "sliding window"),
    ({"window": 4}, "causal attention only"),
    ({"query_tile": 0}, "tile size"),
    ({"sinks": np.zeros((5, 1, 1), np.float32)}, "sinks"),
])
def test_bad_arguments_get_one_clear_error(kwargs, words):
    q, k, v = _inputs(np.random.default_rng(0), (1, 2), (1, 2), 4, 4)
    with pytest.raises(GlassformerError, match=words):
        tiled_attention_forward(q, k, v, **kwargs)


@pytest.mark.parametrize("shift", [100.0, -100.0])
def test_scores_beyond_exp_range_take_the_running_max_and_still_equal(shift):
    """Scores shifted by +-100 (a constant bias) overflow exp, or underflow it, without a running
    max: those tiles are redone with it, and the result is still the whole op's."""
    rng = np.random.default_rng(3)
    q, k, v = (a.astype(np.float64) for a in _inputs(rng, (1, 2), (1, 2), 40, 40))
    bias = np.full((1, 1), shift)                                    # the same for every score
    want, whole = attention_forward(q, k, v, causal=True, bias=bias)
    got, tiled = tiled_attention_forward(q, k, v, causal=True, bias=bias, query_tile=16,
                                         key_tile=8)
    np.testing.assert_allclose(got, want, atol=1e-10)
    assert np.isfinite(tiled.lse).all()
    dout = rng.standard_normal(want.shape)
    for mine, theirs in zip(tiled_attention_backward(dout, tiled), attention_backward(dout, whole)):
        np.testing.assert_allclose(mine, theirs, atol=1e-10)
