"""LoRA op: gradcheck, float32 parity with torch autograd, the frozen base, merge/unmerge, dtypes
and input errors."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.lora import CASES
from glassformer.ops.linear import linear_backward, linear_forward
from glassformer.ops.lora import (init_lora, lora_backward, lora_forward, lora_merge, lora_scale,
                                  lora_unmerge)

from ops_parity import assert_close, needs_torch, torch

# Finite differences in float64 agree to ~1e-10 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 parity: three products deep; observed ~3e-7 of the largest entry.
TORCH_RTOL = 1e-5
# Merging then unmerging adds and subtracts the same float32 product: a few ulps of W.
UNMERGE_ATOL = 1e-6


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _random(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


@needs_torch
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch(seed, bias):
    rng = np.random.default_rng(seed)
    c_in, c_out, r = (int(n) for n in rng.integers(2, 40, size=3))
    x, dy = _random(rng, (2, 7, c_in)), _random(rng, (2, 7, c_out))
    w, a, b = _random(rng, (c_in, c_out)), _random(rng, (c_in, r)), _random(rng, (r, c_out))
    bvec = _random(rng, (c_out,)) if bias else None
    scale = lora_scale(16, r)

    y, ctx = lora_forward(x, w, bvec, a, b, scale=scale)
    dx, dw, dbias, da, db = lora_backward(dy, ctx)

    t_x, t_a, t_b = (torch.tensor(v, requires_grad=True) for v in (x, a, b))
    t_w = torch.tensor(w)
    t_bias = torch.tensor(bvec) if bias else None
    # torch's layout: base W^T (out, in), A^T (r, in), B^T (out, r), as peft's LoraLayer
    t_y = (torch.nn.functional.linear(t_x, t_w.T, t_bias)
           + torch.nn.functional.linear(torch.nn.functional.linear(t_x, t_a.T), t_b.T) * scale)
    t_y.backward(torch.tensor(dy))
    assert_close(y, t_y.detach().numpy(), TORCH_RTOL)
    assert_close(dx, t_x.grad.numpy(), TORCH_RTOL)
    assert_close(da, t_a.grad.numpy(), TORCH_RTOL)
    assert_close(db, t_b.grad.numpy(), TORCH_RTOL)
    assert dw is None and dbias is None


def test_frozen_linear_keeps_no_input_and_computes_dx_only():
    rng = np.random.default_rng(0)
    x, w, b = _random(rng, (3, 4)), _random(rng, (4, 5)), _random(rng, (5,))
    dy = _random(rng, (3, 5))
    _, ctx = linear_forward(x, w, b, frozen=True)
    assert ctx.x is None
    dx, dw, db = linear_backward(dy, ctx)
    assert dw is None and db is None
    np.testing.assert_array_equal(dx, linear_backward(dy, linear_forward(x, w, b)[1])[0])


def test_fresh_adapter_is_the_base_layer():
    rng = np.random.default_rng(1)
    a, b = init_lora(64, 8, 4, rng)
    assert a.shape == (64, 4) and b.shape == (4, 8) and a.dtype == np.float32
    assert np.abs(a).max() <= 1.0 / 8.0 and not np.any(b)  # bound 1/sqrt(C_in)
    x, w = _random(rng, (2, 64)), _random(rng, (64, 8))
    y, _ = lora_forward(x, w, None, a, b, scale=2.0)
    np.testing.assert_array_equal(y, x @ w)


def test_merge_gives_the_same_outputs_and_unmerge_gives_w_back():
    rng = np.random.default_rng(2)
    x, w, a, b = (_random(rng, s) for s in ((3, 6), (6, 5), (6, 2), (2, 5)))
    y, _ = lora_forward(x, w, None, a, b, scale=0.75)
    merged = lora_merge(w, a, b, 0.75)
    assert merged.dtype == np.float32
    assert_close(x @ merged, y, TORCH_RTOL)
    np.testing.assert_allclose(lora_unmerge(merged, a, b, 0.75), w, atol=UNMERGE_ATOL)


def test_dropout_acts_on_the_adapter_only():
    rng = np.random.default_rng(3)
    x, w, a, b = (_random(rng, s) for s in ((4, 6), (6, 5), (6, 2), (2, 5)))
    y, ctx = lora_forward(x, w, None, a, b, scale=1.0, dropout=0.5, train=True,
                          rng=np.random.default_rng(0))
    u = np.where(ctx.adapter.drop.keep, x * 2.0, 0.0)
    assert_close(y, x @ w + (u @ a) @ b, TORCH_RTOL)
    y_eval, ctx_eval = lora_forward(x, w, None, a, b, scale=1.0, dropout=0.5, train=False)
    assert ctx_eval.adapter.drop.keep is None
    assert_close(y_eval, x @ w + (x @ a) @ b, TORCH_RTOL)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    rng = np.random.default_rng(0)
    x, w, a, b = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 4), (4, 5), (4, 2), (2, 5)))
    y, ctx = lora_forward(x, w, None, a, b, scale=lora_scale(3, 2, rslora=True))
    dx, _, _, da, db = lora_backward(np.ones_like(y), ctx)
    assert [v.dtype for v in (y, dx, da, db)] == [dtype] * 4


def test_scale_and_input_errors():
    assert lora_scale(16, 8) == 2.0 and lora_scale(16, 4, rslora=True) == 8.0
    with pytest.raises(GlassformerError, match="rank r must be a positive integer"):
        lora_scale(16, 0)
    x, w = np.zeros((2, 4), np.float32), np.zeros((4, 5), np.float32)
    a, b = np.zeros((4, 2), np.float32), np.zeros((2, 5), np.float32)
    with pytest.raises(ShapeError, match=r"expected B of shape \(r=2, C_out\), got \(3, 5\)"):
        lora_forward(x, w, None, a, np.zeros((3, 5), np.float32), scale=1.0)
    with pytest.raises(ShapeError, match=r"expected x of shape \(\.\.\., C_in=4\)"):
        lora_forward(np.zeros((2, 3), np.float32), w, None, a, b, scale=1.0)
    with pytest.raises(ShapeError, match=r"expected w of shape"):
        lora_forward(x, np.zeros((4, 6), np.float32), None, a, b, scale=1.0)
    with pytest.raises(GlassformerError, match="one dtype"):
        lora_forward(x, w, None, a.astype(np.float64), b, scale=1.0)
