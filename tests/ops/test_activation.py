"""Activations (GELU erf/tanh, ReLU, SiLU, sigmoid) and the erf they rely on: gradcheck, torch parity
in float32, dtypes, bad input."""
import math

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.activation import CASES
from glassformer.ops._erf import erf, erfc
from glassformer.ops.activation import (gelu_backward, gelu_forward, relu_backward, relu_forward,
                                        sigmoid_backward, sigmoid_forward, silu_backward,
                                        silu_forward)

GRADCHECK_TOL = 1e-6
# Cody's fits are good to a few float64 ulps; measured worst 8e-16 on the grid below.
ERF_RTOL = 4e-15
# float32 elementwise math rounds at ~6e-8 relative; 1e-5 leaves a wide margin.
TORCH_RTOL = 1e-5
# torch's float32 GELU forms 1 + erf(...) and 1 - tanh(u)^2, which cancel for x < -3: measured
# 1.9e-6 absolute off the float64 value there (ours stays within 2e-7), hence this atol.
TORCH_ATOL = 3e-6
# Our float32 against our own float64: only float32 rounding, no cancellation anywhere.
FLOAT64_RTOL = 1e-5
FLOAT64_ATOL = 1e-7

PAIRS = {
    "gelu-erf": (lambda x: gelu_forward(x, approximate="none"), gelu_backward),
    "gelu-tanh": (lambda x: gelu_forward(x, approximate="tanh"), gelu_backward),
    "relu": (relu_forward, relu_backward),
    "silu": (silu_forward, silu_backward),
    "sigmoid": (sigmoid_forward, sigmoid_backward),
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck_every_mode(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def test_erf_and_erfc_match_math_module():
    grid = np.concatenate([np.linspace(-26.0, 26.0, 20001), np.geomspace(1e-300, 0.5, 200),
                           [0.46875, -0.46875, 4.0, -4.0]])
    want_erf = np.array([math.erf(v) for v in grid])
    want_erfc = np.array([math.erfc(v) for v in grid])
    nonzero = want_erf != 0.0
    erf_err = np.abs(erf(grid) - want_erf)[nonzero] / np.abs(want_erf[nonzero])
    erfc_err = np.abs(erfc(grid) - want_erfc) / want_erfc
    assert erf_err.max() < ERF_RTOL
    assert erfc_err.max() < ERF_RTOL


def test_erfc_edges():
    got = erfc(np.array([0.0, np.inf, -np.inf, 40.0, np.nan]))
    assert got[:4].tolist() == [1.0, 0.0, 2.0, 0.0]
    assert np.isnan(got[4])


def test_exact_gelu_keeps_left_tail_relative_accuracy():
    x = np.array([-10.0, -20.0])
    want = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x])
    out, _ = gelu_forward(x)
    assert np.all(out != 0.0)
    np.testing.assert_allclose(out, want, rtol=ERF_RTOL)


def test_silu_does_not_overflow_for_large_inputs():
    x = np.array([-1000.0, 1000.0], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise"):
        out, ctx = silu_forward(x)
        dx = silu_backward(np.ones_like(out), ctx)
    assert out.tolist() == [-0.0, 1000.0]
    assert dx.tolist() == [0.0, 1.0]


def test_relu_slope_at_zero_is_zero():
    out, ctx = relu_forward(np.array([0.0]))
    assert relu_backward(np.array([1.0]), ctx).tolist() == [0.0]


@pytest.mark.parametrize("name", PAIRS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(name, dtype):
    forward, backward = PAIRS[name]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(dtype)
    out, ctx = forward(x)
    dx = backward(np.ones_like(out), ctx)
    assert out.dtype == dtype and dx.dtype == dtype
    assert out.shape == x.shape and dx.shape == x.shape


@pytest.mark.parametrize("name", PAIRS)
def test_bad_input_is_rejected(name):
    forward, _ = PAIRS[name]
    with pytest.raises(GlassformerError, match="expected x to be a NumPy array"):
        forward([1.0, 2.0])
    with pytest.raises(GlassformerError, match="expected x to have dtype float32 or float64"):
        forward(np.arange(3))


def test_unknown_gelu_mode_is_rejected():
    with pytest.raises(GlassformerError, match="approximate to be 'none' or 'tanh', got 'fast'"):
        gelu_forward(np.zeros(2), approximate="fast")


torch = pytest.importorskip("torch")
F = torch.nn.functional

TORCH_FNS = {
    "gelu-erf": lambda t: F.gelu(t, approximate="none"),
    "gelu-tanh": lambda t: F.gelu(t, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
}


@pytest.mark.parametrize("name", PAIRS)
def test_float32_parity_with_torch_and_float64(name):
    rng = np.random.default_rng(7)
    x = np.concatenate([3.0 * rng.standard_normal(300), [-9.0, -6.0, -0.6, 0.7, 6.0, 9.0]])
    x = x.astype(np.float32).reshape(6, 51)
    dout = rng.standard_normal(x.shape).astype(np.float32)
    forward, backward = PAIRS[name]
    out, ctx = forward(x)
    dx = backward(dout, ctx)
    out64, ctx64 = forward(x.astype(np.float64))
    dx64 = backward(dout.astype(np.float64), ctx64)
    np.testing.assert_allclose(out, out64, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)
    np.testing.assert_allclose(dx, dx64, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)

    x_t = torch.tensor(x, requires_grad=True)
    out_t = TORCH_FNS[name](x_t)
    out_t.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, out_t.detach().numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(dx, x_t.grad.numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_without_slope_gives_the_same_output_and_refuses_backward(approximate):
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    out, _ = gelu_forward(x, approximate=approximate)
    fast, ctx = gelu_forward(x, approximate=approximate, keep_slope=False)
    np.testing.assert_array_equal(fast, out)
    assert fast.dtype == np.float32 and ctx.slope is None
    with pytest.raises(GlassformerError, match="keep_slope=False"):
        gelu_backward(np.ones_like(x), ctx)
