"""Cross-entropy (and log-softmax) ops: gradcheck, float32 parity with torch including
ignore_index and label smoothing, dtypes kept, the all-ignored rule, and input errors."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.cross_entropy import CASES
from glassformer.ops.cross_entropy import (cross_entropy_backward, cross_entropy_forward,
                                           log_softmax_backward, log_softmax_forward)

from ops_parity import assert_close as _assert_close, needs_torch, torch

# Finite differences in float64 agree to ~1e-9 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 parity: observed differences are <= ~4e-7 of the largest entry (log-sum-exp and the
# mean rounded in a different order); 1e-5 passes a right op and fails a wrong one.
TORCH_RTOL = 1e-5


def _random_problem(seed, lead_ndim):
    """float32 logits (..., V) with a wide spread, targets (...) with ~1/4 set to -100."""
    rng = np.random.default_rng(seed)
    lead = tuple(int(n) for n in rng.integers(1, 7, size=lead_ndim))
    n_classes = int(rng.integers(2, 200))
    logits = (rng.standard_normal(lead + (n_classes,)) * 4.0).astype(np.float32)
    targets = rng.integers(0, n_classes, size=lead)
    targets[rng.random(lead) < 0.25] = -100
    targets.reshape(-1)[0] = 0  # at least one counted position, so torch's mean is not NaN
    return rng, logits, targets


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


@needs_torch
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lead_ndim", [1, 2])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
def test_cross_entropy_matches_torch(seed, lead_ndim, smoothing):
    rng, logits, targets = _random_problem(seed, lead_ndim)
    n_classes = logits.shape[-1]
    dloss = np.array(rng.standard_normal(), dtype=np.float32)

    loss, ctx = cross_entropy_forward(logits, targets, label_smoothing=smoothing)
    dlogits = cross_entropy_backward(dloss, ctx)

    t_logits = torch.tensor(logits, requires_grad=True)
    t_loss = torch.nn.functional.cross_entropy(
        t_logits.reshape(-1, n_classes), torch.tensor(targets).reshape(-1),
        ignore_index=-100, label_smoothing=smoothing)
    t_loss.backward(torch.tensor(dloss))
    _assert_close(loss, t_loss.detach().numpy(), TORCH_RTOL)
    _assert_close(dlogits, t_logits.grad.numpy(), TORCH_RTOL)


@needs_torch
def test_custom_ignore_index_matches_torch():
    _, logits, targets = _random_problem(7, 2)
    targets[targets == -100] = 3  # class 3 becomes padding
    loss, ctx = cross_entropy_forward(logits, targets, ignore_index=3, label_smoothing=0.2)
    dlogits = cross_entropy_backward(np.array(1.0, dtype=np.float32), ctx)
    t_logits = torch.tensor(logits, requires_grad=True)
    t_loss = torch.nn.functional.cross_entropy(
        t_logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1),
        ignore_index=3, label_smoothing=0.2)
    t_loss.backward()
    _assert_close(loss, t_loss.detach().numpy(), TORCH_RTOL)
    _assert_close(dlogits, t_logits.grad.numpy(), TORCH_RTOL)


@needs_torch
@pytest.mark.parametrize("seed", [0, 1])
def test_log_softmax_matches_torch(seed):
    rng, x, _ = _random_problem(seed, 2)
    dlogp = rng.standard_normal(x.shape).astype(np.float32)
    logp, ctx = log_softmax_forward(x)
    dx = log_softmax_backward(dlogp, ctx)
    t_x = torch.tensor(x, requires_grad=True)
    t_logp = torch.log_softmax(t_x, dim=-1)
    t_logp.backward(torch.tensor(dlogp))
    _assert_close(logp, t_logp.detach().numpy(), TORCH_RTOL)
    _assert_close(dx, t_x.grad.numpy(), TORCH_RTOL)


def test_ignored_rows_get_zero_gradient():
    logits = np.random.default_rng(0).standard_normal((4, 6))
    targets = np.array([1, -100, 5, -100])
    _, ctx = cross_entropy_forward(logits, targets, label_smoothing=0.1)
    dlogits = cross_entropy_backward(np.array(1.0), ctx)
    assert np.all(dlogits[[1, 3]] == 0.0)
    np.testing.assert_allclose(dlogits.sum(axis=-1), 0.0, atol=1e-15)  # p and q both sum to 1


def test_all_ignored_gives_zero_loss_and_gradient():
    # torch returns NaN here (0 / 0); we define 0, documented in the module docstring.
    logits = np.ones((2, 3), dtype=np.float32)
    loss, ctx = cross_entropy_forward(logits, np.array([-100, -100]))
    dlogits = cross_entropy_backward(np.array(1.0, dtype=np.float32), ctx)
    assert loss.shape == () and float(loss) == 0.0
    assert dlogits.dtype == np.float32 and not dlogits.any()


def test_huge_logits_stay_finite():
    logits = np.array([[1e4, 0.0, -1e4], [-3e4, 3e4, 0.0]], dtype=np.float32)
    loss, ctx = cross_entropy_forward(logits, np.array([0, 2]), label_smoothing=0.1)
    assert np.isfinite(loss) and np.all(np.isfinite(cross_entropy_backward(np.array(1.0), ctx)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    logits = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(dtype)
    targets = np.array([[0, 4, -100], [2, 2, 1]], dtype=np.int32)
    loss, ctx = cross_entropy_forward(logits, targets, label_smoothing=0.1)
    dlogits = cross_entropy_backward(np.ones((), dtype=dtype), ctx)
    logp, ls_ctx = log_softmax_forward(logits)
    dx = log_softmax_backward(np.ones_like(logits), ls_ctx)
    assert loss.shape == () and loss.dtype == dtype
    assert dlogits.dtype == logp.dtype == dx.dtype == dtype


def test_out_of_range_target_is_named():
    targets = np.array([[0, 1, 2], [3, 4, 7]])
    with pytest.raises(GlassformerError) as err:
        cross_entropy_forward(np.zeros((2, 3, 5)), targets)
    assert str(err.value) == ("target 7 at position (1, 2) is outside the V=5 classes of logits "
                              "(and is not ignore_index=-100)")
    with pytest.raises(GlassformerError, match=r"target -1 at position \(0,\)"):
        cross_entropy_forward(np.zeros((2, 5)), np.array([-1, 0]))


def test_shape_and_dtype_errors_use_legend_letters():
    with pytest.raises(ShapeError, match=r"expected targets of shape \(B=2, T=3\), got \(2, 4\)"):
        cross_entropy_forward(np.zeros((2, 3, 5)), np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(ShapeError, match=r"expected targets of shape \(N=4\), got \(3,\)"):
        cross_entropy_forward(np.zeros((4, 5)), np.zeros(3, dtype=np.int64))
    with pytest.raises(GlassformerError, match="target 1.5 at position"):
        cross_entropy_forward(np.zeros((2, 5)), np.array([0.0, 1.5]))


@pytest.mark.parametrize("smoothing", [-0.1, 1.5, float("nan")])
def test_bad_label_smoothing_is_rejected(smoothing):
    with pytest.raises(GlassformerError, match="label_smoothing"):
        cross_entropy_forward(np.zeros((2, 5)), np.array([0, 1]), label_smoothing=smoothing)


def test_bad_ignore_index_is_rejected():
    with pytest.raises(GlassformerError, match="ignore_index"):
        cross_entropy_forward(np.zeros((2, 5)), np.array([0, 1]), ignore_index=-100.0)
