"""RMS norm op: gradcheck, float32 parity with HF's LlamaRMSNorm, dtypes kept, input errors."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.rms_norm import CASES
from glassformer.ops.rms_norm import rms_norm_backward, rms_norm_forward

from ops_parity import assert_close as _assert_close, needs_torch, torch

# Finite differences in float64 agree to ~1e-10 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 parity: observed differences are ~2e-7 of the largest entry (rounding in a different
# order); 1e-5 passes a right op and fails a wrong one.
TORCH_RTOL = 1e-5

if torch is not None:
    class LlamaRMSNormRef(torch.nn.Module):
        """The computation of HF transformers' LlamaRMSNorm, written out (not imported)."""

        def __init__(self, weight, eps):
            super().__init__()
            self.weight, self.eps = torch.nn.Parameter(weight), eps

        def forward(self, x):
            x32 = x.to(torch.float32)
            variance = x32.pow(2).mean(-1, keepdim=True)
            return self.weight * (x32 * torch.rsqrt(variance + self.eps)).to(x.dtype)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


@needs_torch
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_matches_hf_llama_rms_norm(seed):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(2, 65)))
    eps = [1e-6, 1e-5, 0.1][seed % 3]
    x = (rng.standard_normal(shape) * 3.0 + 1.0).astype(np.float32)
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)

    y, ctx = rms_norm_forward(x, w, eps=eps)
    dx, dw = rms_norm_backward(dy, ctx)

    ref = LlamaRMSNormRef(torch.tensor(w), eps)
    t_x = torch.tensor(x, requires_grad=True)
    t_y = ref(t_x)
    t_y.backward(torch.tensor(dy))
    _assert_close(y, t_y.detach().numpy(), TORCH_RTOL)
    _assert_close(dx, t_x.grad.numpy(), TORCH_RTOL)
    _assert_close(dw, ref.weight.grad.numpy(), TORCH_RTOL)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(dtype)
    y, ctx = rms_norm_forward(x, np.ones(4, dtype=dtype))
    dx, dw = rms_norm_backward(np.ones_like(x), ctx)
    assert (y.dtype, dx.dtype, dw.dtype) == (dtype, dtype, dtype)


def test_no_mean_is_subtracted():
    # [3, 4]: mean square 12.5, so y = x / sqrt(12.5); layer norm would give [-1, 1] instead.
    y, _ = rms_norm_forward(np.array([3.0, 4.0]), np.ones(2), eps=0.0)
    np.testing.assert_allclose(y, np.array([3.0, 4.0]) / np.sqrt(12.5), rtol=1e-15)


def test_input_errors():
    x = np.zeros((2, 3, 8), dtype=np.float32)
    with pytest.raises(ShapeError, match=r"expected w of shape \(C=8\), got \(4,\)"):
        rms_norm_forward(x, np.ones(4, dtype=np.float32))
    with pytest.raises(GlassformerError, match="one dtype"):
        rms_norm_forward(x, np.ones(8))
    with pytest.raises(GlassformerError, match="eps"):
        rms_norm_forward(x, np.ones(8, dtype=np.float32), eps=float("nan"))
