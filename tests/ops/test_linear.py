"""Linear op: gradcheck of every registered case (with and without bias, batched), listed by
`glassformer gradcheck`; float32 parity with torch, and dtypes kept."""
from __future__ import annotations

import json

import numpy as np
import pytest
from ops_parity import assert_close, needs_torch, torch

from glassformer.cli import main
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.linear import CASES
from glassformer.ops.linear import linear_backward, linear_forward

# Finite differences in float64 agree to ~1e-10 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 parity: both sides sum the same products in different orders (~1e-7 of the largest
# entry); 1e-5 passes a right op and fails a wrong one.
TORCH_RTOL = 1e-5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def test_gradcheck_command_lists_the_linear_op(capsys):
    assert main(["gradcheck", "linear", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(row["name"], row["mode"]) for row in rows] == [("linear", c.mode) for c in CASES]


@needs_torch
@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch(bias):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)          # (B, T, C_in)
    w = rng.standard_normal((8, 5)).astype(np.float32)             # (C_in, C_out)
    b = rng.standard_normal(5).astype(np.float32) if bias else None
    dy = rng.standard_normal((2, 3, 5)).astype(np.float32)
    y, ctx = linear_forward(x, w, b)
    dx, dw, db = linear_backward(dy, ctx)
    t_x, t_w = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    t_b = torch.tensor(b, requires_grad=True) if bias else None
    t_y = torch.nn.functional.linear(t_x, t_w.T, t_b)  # torch stores W as (out, in)
    t_y.backward(torch.tensor(dy))
    assert_close(y, t_y.detach().numpy(), TORCH_RTOL)
    assert_close(dx, t_x.grad.numpy(), TORCH_RTOL)
    assert_close(dw, t_w.grad.numpy(), TORCH_RTOL)
    if bias:
        assert_close(db, t_b.grad.numpy(), TORCH_RTOL)
    else:
        assert db is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    x, w, b = np.ones((2, 3), dtype), np.ones((3, 4), dtype), np.ones(4, dtype)
    y, ctx = linear_forward(x, w, b)
    dx, dw, db = linear_backward(np.ones_like(y), ctx)
    assert {y.dtype, dx.dtype, dw.dtype, db.dtype} == {np.dtype(dtype)}
