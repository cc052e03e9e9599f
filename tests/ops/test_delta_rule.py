"""Gated DeltaNet's ops: gradcheck of every case, chunked = recurrent in float32, parity with
transformers' torch reference functions (modeling_qwen3_next), dtypes kept, input errors."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.delta_rule import CASES, make_delta_inputs
from glassformer.ops.causal_conv1d import causal_conv1d_backward, causal_conv1d_forward
from glassformer.ops.delta_rule import delta_rule_backward, delta_rule_forward
from glassformer.ops.delta_rule_chunked import (delta_rule_chunked_backward,
                                                delta_rule_chunked_forward)
from glassformer.ops.gated_rms_norm import gated_rms_norm_backward, gated_rms_norm_forward

from ops_parity import assert_close, needs_torch, torch

GRADCHECK_TOL = 1e-6
# chunked against recurrent in float32: the brief's bound, relative to the largest entry
FORMS_TOL = 1e-5
TORCH_RTOL = 1e-5
_NAMES = ("q", "k", "v", "g", "beta")


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _inputs32(seed, **sizes):
    inp = make_delta_inputs(np.random.default_rng(seed), **sizes)
    return {name: x.astype(np.float32) for name, x in inp.items()}


@pytest.mark.parametrize("seed,steps,chunk", [(0, 37, 8), (1, 64, 64), (2, 130, 64), (3, 9, 4)])
def test_chunked_equals_recurrent_float32(seed, steps, chunk):
    inp = _inputs32(seed, b=2, h=3, t=steps, d_k=8, d_v=6)
    args = [inp[n] for n in _NAMES]
    (o_r, s_r), ctx_r = delta_rule_forward(*args, state=inp["state"])
    (o_c, s_c), ctx_c = delta_rule_chunked_forward(*args, state=inp["state"], chunk_size=chunk)
    assert o_c.dtype == np.float32 and s_c.dtype == np.float32
    assert_close(o_c, o_r, FORMS_TOL)
    assert_close(s_c, s_r, FORMS_TOL)
    rng = np.random.default_rng(seed + 10)
    do = rng.standard_normal(o_r.shape).astype(np.float32)
    ds = rng.standard_normal(s_r.shape).astype(np.float32)
    for g_r, g_c in zip(delta_rule_backward(do, ctx_r, dstate=ds),
                        delta_rule_chunked_backward(do, ctx_c, dstate=ds)):
        assert g_c.dtype == np.float32
        assert_close(g_c, g_r, FORMS_TOL)


def test_state_carries_across_calls():
    """Prefill in two calls with the state between them = one call (what decoding relies on)."""
    inp = _inputs32(4, t=12, state=False)
    args = [inp[n] for n in _NAMES]
    (whole, last), _ = delta_rule_chunked_forward(*args)
    (first, mid), _ = delta_rule_chunked_forward(*[a[:, :, :7] for a in args], chunk_size=4)
    (second, end), _ = delta_rule_forward(*[a[:, :, 7:] for a in args], state=mid)
    assert_close(np.concatenate([first, second], axis=2), whole, FORMS_TOL)
    assert_close(end, last, FORMS_TOL)


def test_conv_tail_continues():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 9, 4))
    w = rng.standard_normal((4, 4))
    (whole, tail), _ = causal_conv1d_forward(x, w)
    (a, mid), _ = causal_conv1d_forward(x[:, :5], w)
    (b, end), _ = causal_conv1d_forward(x[:, 5:], w, tail=mid)
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), whole, atol=1e-12)
    np.testing.assert_allclose(end, tail, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_transformers_delta_rule(seed):
    qn = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    inp = _inputs32(seed, b=2, h=2, t=70, d_k=8, d_v=5)
    # transformers takes (B, T, H, D); its l2norm is applied separately here (use_qk_l2norm off)
    tt = {n: torch.tensor(np.moveaxis(inp[n], 2, 1).copy(), requires_grad=True) for n in _NAMES}
    t_state = torch.tensor(inp["state"], requires_grad=True)
    t_out, t_last = qn.torch_chunk_gated_delta_rule(
        tt["q"], tt["k"], tt["v"], g=tt["g"], beta=tt["beta"], initial_state=t_state,
        output_final_state=True)
    rng = np.random.default_rng(seed)
    do = rng.standard_normal((2, 2, 70, 5)).astype(np.float32)
    ds = rng.standard_normal((2, 2, 8, 5)).astype(np.float32)
    ((t_out * torch.tensor(np.moveaxis(do, 2, 1).copy())).sum() + (t_last * torch.tensor(ds)).sum()
     ).backward()
    (out, last), ctx = delta_rule_chunked_forward(*[inp[n] for n in _NAMES], state=inp["state"])
    assert_close(out, np.moveaxis(t_out.detach().numpy(), 1, 2), TORCH_RTOL)
    assert_close(last, t_last.detach().numpy(), TORCH_RTOL)
    grads = delta_rule_chunked_backward(do, ctx, dstate=ds)
    for name, grad in zip(_NAMES, grads):
        assert_close(grad, np.moveaxis(tt[name].grad.numpy(), 1, 2), 1e-4)
    assert_close(grads[5], t_state.grad.numpy(), 1e-4)


@needs_torch
def test_matches_transformers_conv_and_gated_norm():
    qn = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 5)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    (y, _), ctx = causal_conv1d_forward(x, w)
    t_x = torch.tensor(x.transpose(0, 2, 1).copy(), requires_grad=True)
    t_w = torch.tensor(w, requires_grad=True)
    t_y = qn.causal_conv1d_fn.__wrapped__(t_x, t_w) if hasattr(qn.causal_conv1d_fn, "__wrapped__") \
        else qn.causal_conv1d_fn(t_x, t_w)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    t_y.backward(torch.tensor(dy.transpose(0, 2, 1).copy()))
    assert_close(y, t_y.detach().numpy().transpose(0, 2, 1), TORCH_RTOL)
    dx, dw, _ = causal_conv1d_backward(dy, ctx)
    assert_close(dx, t_x.grad.numpy().transpose(0, 2, 1), TORCH_RTOL)
    assert_close(dw, t_w.grad.numpy(), TORCH_RTOL)

    norm = qn.Qwen3NextRMSNormGated(5, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor(rng.standard_normal(5).astype(np.float32)))
    z = rng.standard_normal(x.shape).astype(np.float32)
    t_x2, t_z = torch.tensor(x, requires_grad=True), torch.tensor(z, requires_grad=True)
    t_n = norm(t_x2, t_z)
    t_n.backward(torch.tensor(dy))
    n, nctx = gated_rms_norm_forward(x, z, norm.weight.detach().numpy(), eps=1e-6)
    assert_close(n, t_n.detach().numpy(), TORCH_RTOL)
    for ours, ref in zip(gated_rms_norm_backward(dy, nctx),
                         (t_x2.grad, t_z.grad, norm.weight.grad)):
        assert_close(ours, ref.numpy(), TORCH_RTOL)


def test_input_errors():
    inp = make_delta_inputs(np.random.default_rng(0))
    args = [inp[n] for n in _NAMES]
    with pytest.raises(GlassformerError, match="chunk_size"):
        delta_rule_chunked_forward(*args, chunk_size=0)
    with pytest.raises(ShapeError, match="beta"):
        delta_rule_forward(*args[:4], args[4][:, :, :2])
    with pytest.raises(ShapeError, match="tail"):
        causal_conv1d_forward(np.zeros((1, 3, 2)), np.zeros((2, 4)), tail=np.zeros((1, 2, 2)))
