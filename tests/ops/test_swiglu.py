"""SwiGLU: gradcheck, float32 parity with a torch SwiGLU, dtypes, bad input."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.swiglu import CASES
from glassformer.ops.swiglu import swiglu_backward, swiglu_forward

GRADCHECK_TOL = 1e-6
# One exp, a division and two products in float32: ~1e-7 relative; 1e-5 leaves a wide margin.
TORCH_RTOL = 1e-5
TORCH_ATOL = 1e-6


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck_every_mode(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(dtype):
    rng = np.random.default_rng(0)
    gate, up = (rng.standard_normal((2, 3, 4)).astype(dtype) for _ in range(2))
    out, ctx = swiglu_forward(gate, up)
    dgate, dup = swiglu_backward(np.ones_like(out), ctx)
    assert out.dtype == dgate.dtype == dup.dtype == dtype
    assert out.shape == dgate.shape == dup.shape == gate.shape


def test_bad_input_is_rejected():
    gate = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(ShapeError, match=r"expected up of shape \(\.\.\., F=4\), got \(2, 5\)"):
        swiglu_forward(gate, np.zeros((2, 5), dtype=np.float32))
    with pytest.raises(ShapeError, match="leading dims"):
        swiglu_forward(gate, np.zeros((3, 4), dtype=np.float32))
    with pytest.raises(GlassformerError, match="expected inputs of one dtype"):
        swiglu_forward(gate, np.zeros((2, 4)))
    with pytest.raises(GlassformerError, match="expected gate to be a NumPy array"):
        swiglu_forward([[0.0]], gate)


torch = pytest.importorskip("torch")


def test_float32_parity_with_torch():
    rng = np.random.default_rng(3)
    gate, up, dout = (rng.standard_normal((2, 5, 16)).astype(np.float32) for _ in range(3))
    out, ctx = swiglu_forward(gate, up)
    dgate, dup = swiglu_backward(dout, ctx)

    gate_t = torch.tensor(gate, requires_grad=True)
    up_t = torch.tensor(up, requires_grad=True)
    out_t = torch.nn.functional.silu(gate_t) * up_t     # LLaMA's act_fn(gate_proj(x)) * up_proj(x)
    out_t.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, out_t.detach().numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(dgate, gate_t.grad.numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(dup, up_t.grad.numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
