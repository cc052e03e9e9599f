"""Layer norm op: gradcheck, float32 parity with torch, dtypes kept, and input errors."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.layer_norm import CASES
from glassformer.ops.layer_norm import layer_norm_backward, layer_norm_forward

from ops_parity import assert_close as _assert_close, needs_torch, torch

# Finite differences in float64 agree to ~1e-10 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 parity: both sides round at ~6e-8 per operation in different orders; observed
# differences are ~2e-7 of the largest entry, so 1e-5 passes a right op and fails a wrong one.
TORCH_RTOL = 1e-5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


@needs_torch
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch(seed, bias):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(2, 65)))
    eps = [1e-5, 1e-12, 0.1][seed % 3]
    x = (rng.standard_normal(shape) * 3.0 + 1.0).astype(np.float32)  # off-centre, wide rows
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    b = rng.standard_normal(shape[-1]).astype(np.float32) if bias else None
    dy = rng.standard_normal(shape).astype(np.float32)

    y, ctx = layer_norm_forward(x, w, b, eps=eps)
    dx, dw, db = layer_norm_backward(dy, ctx)

    t_x = torch.tensor(x, requires_grad=True)
    t_w = torch.tensor(w, requires_grad=True)
    t_b = torch.tensor(b, requires_grad=True) if bias else None
    t_y = torch.nn.functional.layer_norm(t_x, (shape[-1],), t_w, t_b, eps)
    t_y.backward(torch.tensor(dy))
    _assert_close(y, t_y.detach().numpy(), TORCH_RTOL)
    _assert_close(dx, t_x.grad.numpy(), TORCH_RTOL)
    _assert_close(dw, t_w.grad.numpy(), TORCH_RTOL)
    if bias:
        _assert_close(db, t_b.grad.numpy(), TORCH_RTOL)
    else:
        assert db is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    w, b = np.ones(4, dtype=dtype), np.zeros(4, dtype=dtype)
    y, ctx = layer_norm_forward(x, w, b)
    grads = layer_norm_backward(np.ones_like(x), ctx)
    assert y.dtype == dtype
    assert [g.dtype for g in grads] == [dtype] * 3


def test_biased_variance_and_eps_inside_sqrt():
    # Row [1, 3]: mean 2, biased var 1 (unbiased would be 2); eps=3 inside the sqrt gives rstd 1/2.
    _, ctx = layer_norm_forward(np.array([[1.0, 3.0]]), np.ones(2), eps=3.0)
    assert ctx.rstd.tolist() == [[0.5]]


def test_shape_errors_use_legend_letters():
    x = np.zeros((2, 3, 8))
    with pytest.raises(ShapeError, match=r"expected w of shape \(C=8\), got \(7,\)"):
        layer_norm_forward(x, np.ones(7))
    with pytest.raises(ShapeError, match=r"expected b of shape \(C=8\), got \(8, 1\)"):
        layer_norm_forward(x, np.ones(8), np.zeros((8, 1)))
    with pytest.raises(ShapeError, match=r"at least one feature .* got \(2, 0\)"):
        layer_norm_forward(np.zeros((2, 0)), np.ones(0))


def test_mixed_dtypes_and_bad_eps_are_rejected():
    x = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(GlassformerError, match="one dtype"):
        layer_norm_forward(x, np.ones(4))
    with pytest.raises(GlassformerError, match="eps"):
        layer_norm_forward(x, np.ones(4, dtype=np.float32), eps=-1e-5)
