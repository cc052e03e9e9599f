"""Residual block (one layer, pre-/post-norm, LayerNorm/RMSNorm, optional cross-attention):
float64 gradcheck per family, float32 parity with a torch mirror (forward and every gradient,
dmemory included), dtypes, bad input."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.residual import block_backward, block_forward, init_block
from glassformer.errors import ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases._block_params import exercised, key_mask
from glassformer.gradcheck.cases.residual_block import CASES

# Finite differences in float64 agree to ~1e-9 when the backward is right.
GRADCHECK_TOL = 1e-6

_NO_BIAS = {"qkv_bias": False, "out_bias": False, "mlp_bias": False}
# name: (config overrides, forward options); n_head is 4, the other sizes are drawn per test.
FAMILIES = {
    "gpt2": ({"mlp": "gelu_tanh"}, dict(causal=True)),
    "nanogpt-no-bias": ({"mlp": "gelu_tanh", "norm_bias": False, **_NO_BIAS}, dict(causal=True)),
    "llama": ({"norm": "rms", "mlp": "swiglu", "position": "rope", "n_kv_head": 2, **_NO_BIAS},
              dict(causal=True, offset=True)),
    "qwen2": ({"norm": "rms", "mlp": "swiglu", "position": "rope", "n_kv_head": 1,
               "out_bias": False, "mlp_bias": False}, dict(causal=True)),
    "bert": ({"norm_position": "post", "mlp": "gelu"}, dict(causal=False, padding=True)),
    "decoder": ({"norm_position": "post", "mlp": "relu"},
                dict(causal=True, cross=True, memory_padding=True)),
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _setup(family, dtype, *, b=2, t=3, s=4, d=4, f=24, seed=0):
    """Params (norms and biases moved off 1 and 0), inputs and forward options of one family."""
    cfg_kwargs, opts = FAMILIES[family]
    c = 4 * d
    cfg = BlockConfig(d_model=c, n_head=4, d_ff=f, **cfg_kwargs)
    rng = np.random.default_rng(seed)
    params = init_block(cfg, rng, std=1.0 / math.sqrt(c), out_std=1.0 / math.sqrt(f),
                        cross=opts.get("cross", False), dtype=np.float64)
    params = {name: p.astype(dtype) for name, p in exercised(params, rng).items()}
    inputs = {"x": rng.standard_normal((b, t, c)).astype(dtype)}
    kwargs = {"causal": opts["causal"]}
    # >= 2 real keys per row: with one, attention weights are one-hot and dq is exactly 0 here
    # but rounding noise in torch
    if opts.get("padding"):
        kwargs["key_mask"] = key_mask(list(rng.integers(2, t + 1, size=b)), t)
    if opts.get("cross"):
        inputs["memory"] = rng.standard_normal((b, s, c)).astype(dtype)
    if opts.get("memory_padding"):
        kwargs["memory_mask"] = key_mask(list(rng.integers(2, s + 1, size=b)), s)
    if opts.get("offset"):
        kwargs["positions"] = np.arange(3, 3 + t)
    return cfg, params, inputs, kwargs


def _run(cfg, params, inputs, kwargs, dout=None):
    out, ctx = block_forward(params, inputs["x"], cfg, memory=inputs.get("memory"), **kwargs)
    dout = np.ones_like(out) if dout is None else dout
    grads, dx, dmemory = block_backward(dout, ctx)
    grads["x"] = dx
    if dmemory is not None:
        grads["memory"] = dmemory
    return out, grads


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("family", FAMILIES)
def test_dtype_is_kept(family, dtype):
    out, grads = _run(*_setup(family, dtype))
    assert out.dtype == dtype
    assert all(g.dtype == dtype for g in grads.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_backward_returns_a_gradient_for_every_param_and_input(family):
    cfg, params, inputs, kwargs = _setup(family, np.float64)
    _, grads = _run(cfg, params, inputs, kwargs)
    assert sorted(grads) == sorted([*params, *inputs])
    assert all(grads[name].shape == value.shape for name, value in {**params, **inputs}.items())


def test_dropout_at_eval_changes_nothing():
    cfg, params, inputs, kwargs = _setup("gpt2", np.float64)
    cfg_drop = dataclasses.replace(cfg, dropout=0.5)
    out, _ = block_forward(params, inputs["x"], cfg, **kwargs)
    out_eval, _ = block_forward(params, inputs["x"], cfg_drop, train=False, **kwargs)
    out_train, _ = block_forward(params, inputs["x"], cfg_drop, train=True,
                                 rng=np.random.default_rng(0), **kwargs)
    np.testing.assert_array_equal(out, out_eval)
    assert not np.allclose(out, out_train)


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_error_wrong_x_shape_names_legend_letters(family):
    """Pre-norm layers meet x in the norm first; the error must still name x, not the norm."""
    cfg, params, _, kwargs = _setup(family, np.float32)
    with pytest.raises(ShapeError, match=r"expected x of shape \(B, T, C=16\), got \(2, 3, 12\)"):
        block_forward(params, np.zeros((2, 3, 12), np.float32), cfg, **kwargs)
    with pytest.raises(ShapeError, match=r"expected x of shape \(B, T, C=16\), got \(3, 16\)"):
        block_forward(params, np.zeros((3, 16), np.float32), cfg, **kwargs)


def test_error_wrong_memory_shape():
    cfg, params, inputs, kwargs = _setup("decoder", np.float32)
    with pytest.raises(ShapeError, match=r"expected memory of shape \(B=2, S, C=16\), "
                                         r"got \(2, 4, 8\)"):
        block_forward(params, inputs["x"], cfg, memory=np.zeros((2, 4, 8), np.float32),
                      **kwargs)


torch = pytest.importorskip("torch")
import torch_blocks  # noqa: E402  (needs torch)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("family", FAMILIES)
def test_matches_torch(family, seed):
    """Random shapes: B 1..3, T and S 2..7, D in {4, 8, 16} (C = 4 D), F 4..96."""
    rng = np.random.default_rng(seed)
    b, t, s, f = (int(n) for n in (rng.integers(1, 4), rng.integers(2, 8), rng.integers(2, 8),
                                   rng.integers(4, 97)))
    d = int(rng.choice([4, 8, 16]))
    cfg, params, inputs, kwargs = _setup(family, np.float32, b=b, t=t, s=s, d=d, f=f,
                                         seed=seed)
    dout = rng.standard_normal((b, t, 4 * d)).astype(np.float32)
    out, ours = _run(cfg, params, inputs, kwargs, dout)

    pmap = torch_blocks.ParamMap()
    module = torch_blocks.TorchBlock(params, cfg, pmap, cross="memory" in inputs)
    out_ref, theirs = torch_blocks.run(module, pmap, inputs, dout, **kwargs)
    torch_blocks.assert_close(out, out_ref, "out")
    torch_blocks.assert_grads_match(ours, theirs, key_bias_is_zero=cfg.position != "rope")
