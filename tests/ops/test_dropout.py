"""Dropout op: gradcheck, structure checks (fraction kept, scaling, same mask in backward) and a
comparison with torch's scaling convention, dtypes kept, and input errors.

torch draws its mask from its own random stream, so masks are compared by structure, not equality.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.dropout import CASES
from glassformer.ops.dropout import dropout_backward, dropout_forward

from ops_parity import needs_torch, torch

# Finite differences in float64 agree to ~1e-10 when the backward is right.
GRADCHECK_TOL = 1e-6
# Kept values are x * (1 / (1 - p)), one float32 rounding; torch may round x / (1 - p) instead:
# the two differ by at most an ulp or two, far inside 1e-5.
TORCH_RTOL = 1e-5
# The kept fraction of n Bernoulli(1 - p) draws has std sqrt(p (1 - p) / n); 5 std makes a
# false failure practically impossible (~6e-7) while still catching p used as the keep rate.
FRACTION_SIGMAS = 5.0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_fraction_kept_and_scaling(p):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 500)).astype(np.float32)
    y, ctx = dropout_forward(x, p=p, rng=rng, train=True)
    kept_fraction = float(ctx.keep.mean())
    std = math.sqrt(p * (1.0 - p) / x.size)
    assert abs(kept_fraction - (1.0 - p)) < FRACTION_SIGMAS * std
    assert np.all(y[~ctx.keep] == 0.0)
    np.testing.assert_allclose(y[ctx.keep], x[ctx.keep] / (1.0 - p), rtol=TORCH_RTOL)


def test_backward_uses_the_forward_mask():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8, 16))
    dy = rng.standard_normal(x.shape)
    y, ctx = dropout_forward(x, p=0.3, rng=rng, train=True)
    dx = dropout_backward(dy, ctx)
    dropped = y == 0.0
    assert np.all(dx[dropped] == 0.0)
    np.testing.assert_allclose(dx[~dropped], dy[~dropped] / 0.7, rtol=1e-15)
    # A linear op's backward is its adjoint: <dy, y> == <dx, x> up to rounding.
    np.testing.assert_allclose(np.sum(dy * y), np.sum(dx * x), rtol=1e-12)


def test_same_seed_same_mask():
    x = np.ones((6, 7))
    _, first = dropout_forward(x, p=0.5, rng=np.random.default_rng(42), train=True)
    _, again = dropout_forward(x, p=0.5, rng=np.random.default_rng(42), train=True)
    np.testing.assert_array_equal(first.keep, again.keep)


@pytest.mark.parametrize("p, train", [(0.5, False), (0.0, True)])
def test_identity_modes_draw_nothing(p, train):
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    x = np.arange(6.0).reshape(2, 3)
    y, ctx = dropout_forward(x, p=p, rng=rng, train=train)
    assert y is x and ctx.keep is None
    assert rng.bit_generator.state == state  # the caller's random stream did not move
    dy = np.ones_like(x)
    dx = dropout_backward(dy, ctx)
    assert dx is not dy and np.array_equal(dx, dy)


@needs_torch
@pytest.mark.parametrize("p", [0.2, 0.6])
def test_scaling_matches_torch(p):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 64)) + 3.0).astype(np.float32)  # no exact zeros in x
    torch.manual_seed(0)
    t_y = torch.nn.functional.dropout(torch.tensor(x), p=p, training=True).numpy()
    y, ctx = dropout_forward(x, p=p, rng=rng, train=True)
    t_kept = t_y != 0.0
    # Same rule on both sides: survivors are x / (1 - p), the rest exactly 0.
    np.testing.assert_allclose(y[ctx.keep], x[ctx.keep] / (1.0 - p), rtol=TORCH_RTOL)
    np.testing.assert_allclose(t_y[t_kept], x[t_kept] / (1.0 - p), rtol=TORCH_RTOL)
    assert t_y.dtype == y.dtype == np.float32
    # Both keep about 1 - p of 4096 elements (5 std of a binomial).
    std = math.sqrt(p * (1.0 - p) / x.size)
    assert abs(t_kept.mean() - ctx.keep.mean()) < 2.0 * FRACTION_SIGMAS * std


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    x = np.ones((3, 4), dtype=dtype)
    y, ctx = dropout_forward(x, p=0.25, rng=np.random.default_rng(0), train=True)
    dx = dropout_backward(np.ones_like(x), ctx)
    assert y.dtype == dtype and dx.dtype == dtype


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, float("nan"), "0.1", True])
def test_bad_p_is_rejected(p):
    with pytest.raises(GlassformerError, match="p"):
        dropout_forward(np.ones(3), p=p, rng=np.random.default_rng(0), train=True)


def test_training_without_rng_is_rejected():
    with pytest.raises(GlassformerError, match="needs rng"):
        dropout_forward(np.ones(3), p=0.1, rng=None, train=True)
    with pytest.raises(GlassformerError, match="train"):
        dropout_forward(np.ones(3), p=0.1, rng=np.random.default_rng(0), train=1)
