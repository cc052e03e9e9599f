"""Softmax op: torch parity in float32 with and without a mask, the unshifted first try and its
fallback to the row-max shift (overflow, underflow, fully masked rows), dtypes, backward, and
one clear error for each bad input."""
import re
import warnings

import numpy as np
import pytest
from ops_parity import needs_torch, torch

from glassformer.errors import GlassformerError, ShapeError
from glassformer.ops.softmax import (SAFE_ROW_SUM, masked_logits, row_sum, softmax_backward,
                                     softmax_forward)

RTOL, ATOL = 1e-6, 1e-7


def torch_softmax(x, mask=None):
    t = torch.from_numpy(x)
    if mask is not None:
        t = t.masked_fill(~torch.from_numpy(np.broadcast_to(mask, x.shape).copy()), -torch.inf)
    return torch.softmax(t, dim=-1).numpy()


@needs_torch
@pytest.mark.parametrize("seed", range(3))
def test_matches_torch_with_causal_mask(seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, 3, 5, 5)) * 4.0).astype(np.float32)
    mask = np.tril(np.ones((5, 5), dtype=bool))
    probs, _ = softmax_forward(x, mask=mask)
    assert probs.dtype == np.float32
    np.testing.assert_allclose(probs, torch_softmax(x, mask), rtol=RTOL, atol=ATOL)
    assert np.all(probs[..., ~mask] == 0.0)


@needs_torch
@pytest.mark.parametrize("row", [[1000.0, 0.0, -5.0],        # exp overflows without the shift
                                 [-2000.0, -2001.0, -2003.0],  # every exp underflows to 0
                                 [-60.0, -61.0, -200.0],       # the row sum is below 2^-64
                                 [88.0, 88.0, 88.0]])          # each exp is finite, their sum not
def test_rows_that_need_the_shift_match_torch_without_warnings(row):
    x = np.array([[0.5, 1.0, 2.0], row], dtype=np.float32)    # one easy row beside it
    with warnings.catch_warnings():
        warnings.simplefilter("error")                        # no overflow RuntimeWarning leaks
        probs, _ = softmax_forward(x)
    np.testing.assert_allclose(probs, torch_softmax(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-6)


@needs_torch
def test_the_unshifted_try_is_safe_exactly_when_row_sums_are_finite_and_not_tiny():
    x = np.array([[-40.0, -41.0], [-50.0, -50.0]], dtype=np.float32)
    sums = row_sum(np.exp(x))
    assert sums[0, 0] >= SAFE_ROW_SUM > sums[1, 0]  # so the second row takes the shifted path
    probs, _ = softmax_forward(x)
    np.testing.assert_allclose(probs, torch_softmax(x), rtol=RTOL, atol=ATOL)


def test_fully_masked_row_gives_zeros():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    mask = np.array([[True, False, True], [False, False, False]])
    probs, ctx = softmax_forward(x, mask=mask)
    assert np.all(probs[1] == 0.0) and np.isclose(probs[0].sum(), 1.0)
    assert np.all(softmax_backward(np.ones_like(x), ctx)[1] == 0.0)


def test_masked_logits_adds_minus_inf_where_masked_and_keeps_dtype():
    x = np.ones((2, 2), dtype=np.float32)
    out = masked_logits(x, np.array([True, False]))
    assert out.dtype == np.float32 and out.tolist() == [[1.0, -np.inf], [1.0, -np.inf]]
    assert masked_logits(x, None) is x


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept_and_backward_matches_torch(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 7)).astype(dtype)
    dprobs = rng.standard_normal((4, 7)).astype(dtype)
    probs, ctx = softmax_forward(x)
    dx = softmax_backward(dprobs, ctx)
    assert probs.dtype == dtype and dx.dtype == dtype
    t = torch.from_numpy(x).requires_grad_(True)
    torch.softmax(t, dim=-1).backward(torch.from_numpy(dprobs))
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-5, atol=1e-6)


X = np.zeros((2, 3), dtype=np.float32)  # (B, S): a valid input beside each bad one


def test_x_must_be_a_float_array():
    with pytest.raises(GlassformerError, match="expected x to have dtype float32 or float64, "
                                               "got int64"):
        softmax_forward(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(GlassformerError, match="expected x to be a NumPy array .* got list"):
        softmax_forward([1.0, 2.0])


def test_x_needs_a_last_axis_with_entries():
    with pytest.raises(ShapeError, match=r"expected x of shape \(\.\.\., S\), got \(\)"):
        softmax_forward(np.array(1.0, dtype=np.float32))
    with pytest.raises(ShapeError, match=r"at least one entry per row .* \(S >= 1\), got \(2, 0\)"):
        softmax_forward(np.zeros((2, 0), dtype=np.float32))


def test_mask_must_be_boolean():
    with pytest.raises(GlassformerError,
                       match=r"expected mask to be a boolean array \(True = kept\), got int64"):
        softmax_forward(X, mask=np.ones((2, 3), dtype=np.int64))
    with pytest.raises(GlassformerError, match="boolean array .* got list"):
        softmax_forward(X, mask=[True, False, True])


@pytest.mark.parametrize("shape", [(4,),          # S differs
                                   (2, 2, 3)])    # would add a leading dim to the output
def test_mask_must_broadcast_to_x_without_growing_it(shape):
    with pytest.raises(ShapeError, match=r"expected mask broadcastable to x's shape "
                                         rf"\(\.\.\., S\) = \(2, 3\), got {re.escape(str(shape))}"):
        softmax_forward(X, mask=np.ones(shape, dtype=bool))
