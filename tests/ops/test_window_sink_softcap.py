"""Today's attention ops: the sliding-window mask, attention sinks, logit soft-capping and the
clamped SwiGLU: gradcheck rows, float32 parity with torch written as transformers writes them,
dtypes kept, bad input in one line."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases import attention, clamped_swiglu, sink
from glassformer.ops.attention import attention_backward, attention_forward, causal_mask
from glassformer.ops.clamped_swiglu import clamped_swiglu_backward, clamped_swiglu_forward
from glassformer.ops.softcap import softcap_backward, softcap_forward

torch = pytest.importorskip("torch")

ROWS = [c for c in attention.CASES if c.mode in ("window", "window-cached", "softcap", "sinks",
                                                 "sinks-gqa")] + sink.CASES + clamped_swiglu.CASES


@pytest.mark.parametrize("case", ROWS, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck_rows(case):
    result = run_case(case)
    assert result.max_rel_err < 1e-6, result.per_input


def test_window_mask_is_transformers_sliding_window_overlay():
    from transformers.masking_utils import sliding_window_causal_mask_function
    rule = sliding_window_causal_mask_function(3)
    zero = torch.tensor(0)
    theirs = rule(zero, zero, torch.arange(7)[:, None], torch.arange(7)[None, :])   # (T, S)
    assert causal_mask(7, 7, window=3).tolist() == theirs.tolist()


def _torch_sinks(q, k, v, sinks, window):
    """transformers' GptOss eager attention: cat the sink column, shift, softmax, drop it."""
    t = q.shape[-2]
    allowed = torch.from_numpy(causal_mask(t, t, window))
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    column = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, t, 1)
    joined = torch.cat([scores, column], dim=-1)
    joined = joined - joined.max(dim=-1, keepdim=True).values
    return torch.softmax(joined, dim=-1)[..., :-1] @ v


def test_sinks_and_window_match_torch_forward_and_backward():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 6, 4)).astype(np.float32) for _ in range(3))
    sinks = rng.standard_normal(3).astype(np.float32)
    dout = rng.standard_normal((2, 3, 6, 4)).astype(np.float32)
    out, ctx = attention_forward(q, k, v, causal=True, window=2, sinks=sinks.reshape(3, 1, 1))
    dq, dk, dv, dsinks = attention_backward(dout, ctx)
    tq, tk, tv, ts = (torch.tensor(a, requires_grad=True) for a in (q, k, v, sinks))
    ref = _torch_sinks(tq, tk, tv, ts, 2)
    ref.backward(torch.from_numpy(dout))
    np.testing.assert_allclose(out, ref.detach().numpy(), atol=1e-6)
    for ours, theirs in ((dq, tq), (dk, tk), (dv, tv), (dsinks.reshape(3), ts)):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), atol=1e-5)
    assert out.dtype == dq.dtype == dsinks.dtype == np.float32


def test_softcap_matches_torch_and_keeps_dtype():
    x = np.linspace(-30, 30, 13, dtype=np.float32)
    y, ctx = softcap_forward(x, 5.0)
    tx = torch.tensor(x, requires_grad=True)
    ref = torch.tanh(tx / 5.0) * 5.0
    ref.backward(torch.ones(13))
    np.testing.assert_allclose(y, ref.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(softcap_backward(np.ones_like(y), ctx), tx.grad.numpy(), atol=1e-6)
    assert y.dtype == np.float32


def test_clamped_swiglu_matches_transformers_apply_gate():
    rng = np.random.default_rng(1)
    gate, up = (3 * rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))
    out, ctx = clamped_swiglu_forward(gate, up, alpha=1.702, limit=2.0)
    tg, tu = torch.tensor(gate, requires_grad=True), torch.tensor(up, requires_grad=True)
    g, u = tg.clamp(max=2.0), tu.clamp(-2.0, 2.0)
    ref = (u + 1) * (g * torch.sigmoid(g * 1.702))
    ref.backward(torch.ones_like(ref))
    np.testing.assert_allclose(out, ref.detach().numpy(), atol=1e-5)
    dgate, dup = clamped_swiglu_backward(np.ones_like(out), ctx)
    np.testing.assert_allclose(dgate, tg.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(dup, tu.grad.numpy(), atol=1e-5)


def test_bad_input_is_one_line():
    q = np.zeros((1, 2, 3, 4), np.float32)
    with pytest.raises(GlassformerError, match="sliding window of at least 1 token, got 0"):
        attention_forward(q, q, q, causal=True, window=0)
    with pytest.raises(GlassformerError, match="causal attention only"):
        attention_forward(q, q, q, window=2)
    with pytest.raises(ShapeError, match="sinks broadcastable"):
        attention_forward(q, q, q, causal=True, sinks=np.zeros((3, 1, 1), np.float32))
    with pytest.raises(GlassformerError, match="soft cap that is a number > 0"):
        softcap_forward(q, 0.0)


@pytest.mark.parametrize("t,s", [(300, 300), (290, 310)])
def test_a_long_windowed_prompt_by_blocks_equals_the_whole_product(t, s):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, t, 8)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, s, 8)).astype(np.float32) for _ in range(2))
    out, ctx = attention_forward(q, k, v, causal=True, window=37)        # by blocks: a band
    whole, whole_ctx = attention_forward(q, k, v, mask=causal_mask(t, s, 37))
    np.testing.assert_allclose(out, whole, atol=1e-6)
    np.testing.assert_allclose(ctx.softmax.probs, whole_ctx.softmax.probs, atol=1e-6)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    for ours, theirs in zip(attention_backward(dout, ctx), attention_backward(dout, whole_ctx)):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
