"""Attention op: float64 gradcheck in every mode, torch parity in float32, dtypes, bad input."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.attention import CASES
from glassformer.ops.attention import attention_backward, attention_forward, causal_mask

# float32 matmuls over D <= 16 and softmax round at ~1e-7; 1e-5 relative leaves a wide margin.
TORCH_RTOL = 1e-5
TORCH_ATOL = 1e-6
GRADCHECK_TOL = 1e-6


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck_every_mode(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def test_fully_masked_row_gives_zeros_not_nan():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    mask = np.ones((3, 3), dtype=bool)
    mask[1] = False
    out, ctx = attention_forward(q, k, v, mask=mask)
    dq, dk, dv = attention_backward(np.ones_like(out), ctx)
    assert np.all(np.isfinite(out)) and np.all(out[:, 1] == 0.0)
    assert np.all(dq[:, 1] == 0.0)
    assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))


def test_causal_mask_is_end_aligned_for_cached_queries():
    expected = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)
    assert np.array_equal(causal_mask(2, 4), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(dtype):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 2, 3, 4)).astype(dtype) for _ in range(3))
    out, ctx = attention_forward(q, k, v, causal=True, scale=0.3)
    grads = attention_backward(np.ones_like(out), ctx)
    assert out.dtype == dtype
    assert all(g.dtype == dtype for g in grads)


torch = pytest.importorskip("torch")
F = torch.nn.functional

PARITY_SETUPS = {
    "heads": dict(lead=(2, 3), t=5, s=5, d=8, dv=8),
    "causal": dict(lead=(2, 3), t=5, s=5, d=8, dv=8, causal=True),
    "cross": dict(lead=(2, 2), t=3, s=7, d=16, dv=4),
    "causal-cached": dict(lead=(1, 4), t=2, s=6, d=8, dv=8, causal=True),
    "padding": dict(lead=(3, 2), t=6, s=6, d=8, dv=8, padding=True),
    "padding-causal": dict(lead=(3, 2), t=6, s=6, d=8, dv=8, padding=True, causal=True),
}


@pytest.mark.parametrize("name", PARITY_SETUPS)
def test_matches_torch_sdpa(name):
    setup = PARITY_SETUPS[name]
    rng = np.random.default_rng(7)
    lead, t, s = setup["lead"], setup["t"], setup["s"]
    q = rng.standard_normal(lead + (t, setup["d"])).astype(np.float32)
    k = rng.standard_normal(lead + (s, setup["d"])).astype(np.float32)
    v = rng.standard_normal(lead + (s, setup["dv"])).astype(np.float32)
    dout = rng.standard_normal(lead + (t, setup["dv"])).astype(np.float32)
    mask = None
    if setup.get("padding"):
        lengths = rng.integers(1, s + 1, size=lead[0])
        lengths[0] = s
        mask = (np.arange(s)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
    causal = setup.get("causal", False)
    out, ctx = attention_forward(q, k, v, mask=mask, causal=causal)
    dq, dk, dv = attention_backward(dout, ctx)

    # torch's is_causal is top-left aligned; pass our (end-aligned) rule as an explicit mask.
    full = np.ones((t, s), dtype=bool) if mask is None else mask
    if causal:
        full = np.logical_and(full, causal_mask(t, s))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tout = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(full))
    tout.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    for ours, theirs in ((dq, tq), (dk, tk), (dv, tv)):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)


def test_gqa_broadcast_matches_repeated_heads_in_torch():
    rng = np.random.default_rng(3)
    b, n_kv, group, t, d = 2, 2, 3, 4, 8
    q = rng.standard_normal((b, n_kv, group, t, d)).astype(np.float32)
    k = rng.standard_normal((b, n_kv, 1, t, d)).astype(np.float32)
    v = rng.standard_normal((b, n_kv, 1, t, d)).astype(np.float32)
    dout = rng.standard_normal((b, n_kv, group, t, d)).astype(np.float32)
    out, ctx = attention_forward(q, k, v, causal=True)
    dq, dk, dv = attention_backward(dout, ctx)
    assert dk.shape == k.shape and dv.shape == v.shape
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tout = F.scaled_dot_product_attention(tq, tk.expand_as(tq), tv.expand_as(tq), is_causal=True)
    tout.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(dk, tk.grad.numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(dv, tv.grad.numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)


def _qkv(q_shape=(2, 3, 4), k_shape=(2, 3, 4), v_shape=(2, 3, 4)):
    return (np.zeros(q_shape, np.float32), np.zeros(k_shape, np.float32),
            np.zeros(v_shape, np.float32))


def test_error_mismatched_head_dim():
    with pytest.raises(ShapeError, match=r"k of shape \(\.\.\., S, D=4\), got \(2, 3, 5\)"):
        attention_forward(*_qkv(k_shape=(2, 3, 5)))


def test_error_mismatched_leading_dims():
    with pytest.raises(ShapeError, match="leading dims"):
        attention_forward(*_qkv(k_shape=(3, 3, 4), v_shape=(3, 3, 4)))


def test_error_k_v_lengths_differ():
    with pytest.raises(ShapeError, match=r"v of shape"):
        attention_forward(*_qkv(v_shape=(2, 4, 4)))


def test_error_non_boolean_mask():
    with pytest.raises(GlassformerError, match="mask to be a boolean array"):
        attention_forward(*_qkv(), mask=np.ones((3, 3)))


def test_error_mask_not_broadcastable():
    with pytest.raises(ShapeError, match=r"mask broadcastable to \(\.\.\., T, S\)"):
        attention_forward(*_qkv(), mask=np.ones((4, 3), dtype=bool))


def test_error_non_numeric_input():
    with pytest.raises(GlassformerError, match="q to have dtype float32 or float64"):
        attention_forward(np.array([["a"]]), *_qkv()[1:])
    with pytest.raises(GlassformerError, match="NumPy array"):
        attention_forward([[1.0]], *_qkv()[1:])


def test_error_mixed_dtypes():
    q, k, v = _qkv()
    with pytest.raises(GlassformerError, match="one dtype"):
        attention_forward(q.astype(np.float64), k, v)


@pytest.mark.parametrize("t, s, grouped, with_mask, with_bias", [
    (300, 300, False, False, False),   # a prompt: 3 blocks, the last one partial
    (260, 400, True, True, False),     # queries after 140 cached keys, GQA, padding
    (257, 257, False, False, True),    # an ALiBi-style bias, one query in the last block
    (300, 200, False, False, False),   # fewer keys than queries: the first rows see nothing
])
def test_causal_blocks_equal_the_whole_product(t, s, grouped, with_mask, with_bias):
    """Long causal attention runs block by block; weights, output and gradients are the whole
    product's (computed here through the same mask given explicitly, which takes that path)."""
    from glassformer.ops.attention import CAUSAL_BLOCK, causal_mask

    assert t > CAUSAL_BLOCK
    rng = np.random.default_rng(0)
    lead_q, lead_k = ((1, 2, 3), (1, 2, 1)) if grouped else ((2, 3), (2, 3))
    q = rng.standard_normal(lead_q + (t, 8))
    k = rng.standard_normal(lead_k + (s, 8))
    v = rng.standard_normal(lead_k + (s, 5))
    mask = rng.random(lead_k[:1] + (1,) * (len(lead_k) - 1) + (1, s)) > 0.2 if with_mask else None
    bias = rng.standard_normal(lead_q[-1:] + (t, s)) if with_bias else None
    out, ctx = attention_forward(q, k, v, mask=mask, causal=True, bias=bias)
    rule = causal_mask(t, s) if mask is None else np.logical_and(mask, causal_mask(t, s))
    ref_out, ref_ctx = attention_forward(q, k, v, mask=rule, causal=False, bias=bias)
    np.testing.assert_allclose(out, ref_out, atol=1e-12)
    np.testing.assert_allclose(ctx.softmax.probs, ref_ctx.softmax.probs, atol=1e-12)
    dout = rng.standard_normal(out.shape)
    for grad, ref in zip(attention_backward(dout, ctx), attention_backward(dout, ref_ctx)):
        np.testing.assert_allclose(grad, ref, atol=1e-10)


@pytest.mark.parametrize("t", [5, 300])
def test_without_kept_weights_the_output_is_the_same_and_backward_refuses(t):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, t, 8)) for _ in range(3))
    out, _ = attention_forward(q, k, v, causal=True)
    lean, ctx = attention_forward(q, k, v, causal=True, keep_weights=False)
    np.testing.assert_array_equal(lean, out)
    assert ctx.softmax is None
    with pytest.raises(GlassformerError, match="keep_weights=False"):
        attention_backward(np.ones_like(out), ctx)
