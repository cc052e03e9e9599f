"""MLP block (GELU erf/tanh, ReLU, SiLU, SwiGLU; with and without biases): float64 gradcheck, float32
parity with a torch mirror (forward and every gradient), dtypes, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.mlp import init_mlp, mlp_backward, mlp_forward
from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases._block_params import exercised
from glassformer.gradcheck.cases.mlp_block import CASES

# Finite differences in float64 agree to ~1e-9 when the backward is right.
GRADCHECK_TOL = 1e-6
KINDS = ("gelu", "gelu_tanh", "relu", "silu", "swiglu")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _setup(dtype, kind, bias=True, *, b=2, t=3, c=8, f=20, seed=0):
    cfg = BlockConfig(d_model=c, n_head=1, d_ff=f, mlp=kind, mlp_bias=bias)
    rng = np.random.default_rng(seed)
    params = init_mlp(cfg, rng, std=1.0 / math.sqrt(c), out_std=1.0 / math.sqrt(f),
                      dtype=np.float64)
    params = {name: p.astype(dtype) for name, p in exercised(params, rng).items()}
    x = rng.standard_normal((b, t, c)).astype(dtype)
    return cfg, params, x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_dtype_is_kept(dtype, kind):
    cfg, params, x = _setup(dtype, kind)
    y, ctx = mlp_forward(params, x, cfg)
    grads, dx = mlp_backward(np.ones_like(y), ctx)
    assert y.dtype == dx.dtype == dtype
    assert all(g.dtype == dtype for g in grads.values())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_backward_returns_a_gradient_for_every_param(kind, bias):
    cfg, params, x = _setup(np.float64, kind, bias)
    y, ctx = mlp_forward(params, x, cfg)
    grads, dx = mlp_backward(np.ones_like(y), ctx)
    assert sorted(grads) == sorted(params)
    assert all(grads[name].shape == params[name].shape for name in params)
    assert dx.shape == x.shape


def test_error_wrong_x_shape_names_legend_letters():
    cfg, params, _ = _setup(np.float32, "gelu", c=8)
    with pytest.raises(ShapeError, match=r"expected x of shape \(B, T, C=8\), got \(4, 5, 6\)"):
        mlp_forward(params, np.zeros((4, 5, 6), np.float32), cfg)
    with pytest.raises(ShapeError, match=r"expected x of shape \(B, T, C=8\), got \(5, 8\)"):
        mlp_forward(params, np.zeros((5, 8), np.float32), cfg)
    with pytest.raises(GlassformerError, match="NumPy array"):
        mlp_forward(params, [[[0.0] * 8]], cfg)


def test_error_mixed_dtypes():
    cfg, params, x = _setup(np.float32, "swiglu")
    with pytest.raises(GlassformerError, match="one dtype"):
        mlp_forward(params, x.astype(np.float64), cfg)


torch = pytest.importorskip("torch")
import torch_blocks  # noqa: E402  (needs torch)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_torch(kind, bias, seed):
    rng = np.random.default_rng(seed)
    b, t, c, f = (int(n) for n in (rng.integers(1, 4), rng.integers(1, 8),
                                   rng.integers(4, 65), rng.integers(4, 129)))
    cfg, params, x = _setup(np.float32, kind, bias, b=b, t=t, c=c, f=f, seed=seed)
    y, ctx = mlp_forward(params, x, cfg)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    grads, dx = mlp_backward(dy, ctx)
    ours = {**{"mlp." + name: g for name, g in grads.items()}, "x": dx}

    pmap = torch_blocks.ParamMap()
    module = torch_blocks.TorchMLP({"mlp." + n: p for n, p in params.items()}, cfg, pmap, "mlp.")
    y_ref, theirs = torch_blocks.run(module, pmap, {"x": x}, dy)
    torch_blocks.assert_close(y, y_ref, "y")
    torch_blocks.assert_grads_match(ours, theirs, key_bias_is_zero=False)
