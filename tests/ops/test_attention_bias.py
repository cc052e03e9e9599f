"""Attention's additive score bias (ALiBi and other relative-position biases): parity with
torch's scaled_dot_product_attention given a float mask, dtypes, bad input. The float64 gradcheck
of the "alibi" mode runs with the other attention modes in tests/ops/test_attention.py."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.ops.attention import attention_backward, attention_forward, causal_mask
from glassformer.ops.position import alibi_bias

# float32 matmuls over D <= 16 and softmax round at ~1e-7; 1e-5 relative leaves a wide margin.
TORCH_RTOL = 1e-5
TORCH_ATOL = 1e-6


def _qkv(dtype, b=2, h=4, t=3, s=5, d=8):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((b, h, t, d)).astype(dtype)
    k = rng.standard_normal((b, h, s, d)).astype(dtype)
    v = rng.standard_normal((b, h, s, d)).astype(dtype)
    return q, k, v


def test_zero_bias_changes_nothing():
    q, k, v = _qkv(np.float64)
    out, ctx = attention_forward(q, k, v, causal=True)
    out_b, ctx_b = attention_forward(q, k, v, causal=True, bias=np.zeros((4, 3, 5)))
    np.testing.assert_array_equal(out, out_b)
    for g, g_b in zip(attention_backward(out, ctx), attention_backward(out, ctx_b)):
        np.testing.assert_array_equal(g, g_b)
    assert ctx.bias is None and ctx_b.bias.shape == (4, 3, 5)


def test_row_constant_bias_changes_nothing():
    """ALiBi written as m * j (the reference code) and as -m * (i - j) give equal weights."""
    q, k, v = _qkv(np.float64)
    bias = alibi_bias(4, 3, 5, dtype=np.float64)                   # -m (pos_i - j)
    row_shift = np.arange(3, dtype=np.float64)[:, None] + 2.0      # pos_i, (T, 1)
    slopes = -bias[:, 0, 0] / 2.0                                  # pos_0 - 0 = 2
    shifted = bias + slopes[:, None, None] * row_shift             # m * j
    out, _ = attention_forward(q, k, v, causal=True, bias=bias)
    out_shifted, _ = attention_forward(q, k, v, causal=True, bias=shifted)
    np.testing.assert_allclose(out, out_shifted, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(dtype):
    q, k, v = _qkv(dtype)
    out, ctx = attention_forward(q, k, v, causal=True, bias=alibi_bias(4, 3, 5, dtype=dtype))
    grads = attention_backward(np.ones_like(out), ctx)
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)


def test_bad_bias_is_rejected():
    q, k, v = _qkv(np.float32)
    with pytest.raises(GlassformerError, match="expected inputs of one dtype, got q=float32, "
                                               "bias=float64"):
        attention_forward(q, k, v, bias=alibi_bias(4, 3, 5, dtype=np.float64))
    with pytest.raises(GlassformerError, match="expected bias to have dtype float32 or float64"):
        attention_forward(q, k, v, bias=np.zeros((3, 5), dtype=bool))
    with pytest.raises(ShapeError, match=r"expected bias broadcastable to \(\.\.\., T, S\) = "
                                         r"\(2, 4, 3, 5\), got \(4, 5, 3\)"):
        attention_forward(q, k, v, bias=np.zeros((4, 5, 3), dtype=np.float32))
    with pytest.raises(ShapeError, match="expected bias broadcastable"):   # would grow the output
        attention_forward(q, k, v, bias=np.zeros((3, 2, 4, 3, 5), dtype=np.float32))


torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("t, s", [(5, 5), (2, 6)])
def test_alibi_attention_matches_torch(t, s):
    """torch adds a float attn_mask to the scaled scores: pass ALiBi plus -inf above the diagonal."""
    q, k, v = _qkv(np.float32, h=8, t=t, s=s)
    dout = np.random.default_rng(1).standard_normal(q.shape[:-1] + (v.shape[-1],))
    dout = dout.astype(np.float32)
    bias = alibi_bias(8, t, s, dtype=np.float32)                   # (H, T, S)
    out, ctx = attention_forward(q, k, v, causal=True, bias=bias)
    dq, dk, dv = attention_backward(dout, ctx)

    float_mask = np.where(causal_mask(t, s), bias, -np.inf).astype(np.float32)
    q_t, k_t, v_t = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out_t = F.scaled_dot_product_attention(q_t, k_t, v_t, attn_mask=torch.tensor(float_mask))
    out_t.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, out_t.detach().numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    for ours, theirs in ((dq, q_t), (dk, k_t), (dv, v_t)):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
