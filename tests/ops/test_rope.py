"""RoPE: gradcheck, float32 parity with transformers' LlamaRotaryEmbedding and
apply_rotary_pos_emb (or a torch rewrite of them when transformers is missing), dtypes, bad input."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.rope import CASES
from glassformer.ops.rope import rope_backward, rope_forward, rope_tables, rotate_half

GRADCHECK_TOL = 1e-6
# float32 products and one add per element, ~1e-7 relative; 1e-5 leaves a wide margin. The atol
# covers entries near 0, where relative error means nothing (tables and x are O(1)).
TORCH_RTOL = 1e-5
TORCH_ATOL = 1e-6
# Positions stay below 64 in the parity tests: HF forms angles in float32 (error ~ pos * 6e-8
# radians), ours in float64, so at position p the tables differ by up to ~p * 6e-8.
MAX_PARITY_POSITION = 64


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck_every_mode(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def test_rotation_keeps_norms_and_relative_positions():
    """q_m . k_n depends only on m - n: shifting both positions by 7 keeps every score."""
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 4, 8))                    # 2 x (T=4, D=8)
    cos, sin = rope_tables(4, 8, dtype=np.float64)
    cos7, sin7 = rope_tables(4, 8, offset=7, dtype=np.float64)
    q_rot, _ = rope_forward(q, cos, sin)
    k_rot, _ = rope_forward(k, cos, sin)
    q_rot7, _ = rope_forward(q, cos7, sin7)
    k_rot7, _ = rope_forward(k, cos7, sin7)
    np.testing.assert_allclose(np.linalg.norm(q_rot, axis=-1), np.linalg.norm(q, axis=-1))
    np.testing.assert_allclose(q_rot @ k_rot.T, q_rot7 @ k_rot7.T, atol=1e-12)


def test_offset_tables_are_rows_of_the_full_table():
    cos, sin = rope_tables(10, 6, dtype=np.float64)
    cos_tail, sin_tail = rope_tables(3, 6, offset=7, dtype=np.float64)
    np.testing.assert_array_equal(cos_tail, cos[7:])
    np.testing.assert_array_equal(sin_tail, sin[7:])


def test_backward_is_rotation_by_minus_angle():
    rng = np.random.default_rng(1)
    dout = rng.standard_normal((3, 4))
    cos, sin = rope_tables(3, 4, dtype=np.float64)
    _, ctx = rope_forward(np.zeros((3, 4)), cos, sin)
    rotated_back, _ = rope_forward(dout, cos, -sin)
    np.testing.assert_allclose(rope_backward(dout, ctx), rotated_back, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(dtype):
    cos, sin = rope_tables(3, 4, offset=2, dtype=dtype)
    x = np.random.default_rng(2).standard_normal((2, 2, 3, 4)).astype(dtype)
    out, ctx = rope_forward(x, cos, sin)
    dx = rope_backward(np.ones_like(out), ctx)
    assert cos.dtype == sin.dtype == out.dtype == dx.dtype == dtype
    assert out.shape == dx.shape == x.shape


def test_bad_input_is_rejected():
    with pytest.raises(ShapeError, match="RoPE needs an even head dim D, got 5"):
        rope_tables(3, 5, dtype=np.float32)
    cos, sin = rope_tables(3, 4, dtype=np.float32)
    with pytest.raises(ShapeError, match="RoPE needs an even head dim D, got 5"):
        rope_forward(np.zeros((2, 3, 5), dtype=np.float32), cos, sin)
    with pytest.raises(ShapeError, match=r"expected cos of shape \(\.\.\., T=2, D=4\), got \(3, 4\)"):
        rope_forward(np.zeros((2, 2, 4), dtype=np.float32), cos, sin)
    with pytest.raises(GlassformerError, match="expected inputs of one dtype"):
        rope_forward(np.zeros((3, 4)), cos, sin)
    with pytest.raises(GlassformerError, match="expected offset to be an integer >= 0, got -1"):
        rope_tables(3, 4, offset=-1, dtype=np.float32)
    with pytest.raises(GlassformerError, match="expected theta to be a finite number > 0"):
        rope_tables(3, 4, theta=0.0, dtype=np.float32)
    with pytest.raises(GlassformerError, match="expected dtype float32 or float64, got int64"):
        rope_tables(3, 4, dtype=np.int64)


torch = pytest.importorskip("torch")


def _torch_tables(t, d, theta, offset):
    """(1, T, D) cos and sin, from transformers' LlamaRotaryEmbedding when importable."""
    positions = torch.arange(offset, offset + t)[None]                 # (1, T)
    probe = torch.zeros(1, dtype=torch.float32)
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    except ImportError:
        inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float) / d))
        freqs = positions[..., None].float() * inv_freq                # (1, T, D/2)
        angles = torch.cat((freqs, freqs), dim=-1)                     # (1, T, D)
        return angles.cos(), angles.sin()
    config = LlamaConfig(hidden_size=2 * d, num_attention_heads=2, rope_theta=theta,
                         max_position_embeddings=MAX_PARITY_POSITION)
    return LlamaRotaryEmbedding(config)(probe, positions)


def _torch_apply(q, k, cos, sin):
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError:
        def half_turn(x):
            x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
            return torch.cat((-x2, x1), dim=-1)
        cos, sin = cos[:, None], sin[:, None]                         # (1, T, D) -> (1, 1, T, D)
        return q * cos + half_turn(q) * sin, k * cos + half_turn(k) * sin
    return apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("theta, offset", [(10000.0, 0), (10000.0, 13), (500000.0, 40)])
def test_tables_match_torch(theta, offset):
    t, d = 8, 16
    assert offset + t <= MAX_PARITY_POSITION
    cos, sin = rope_tables(t, d, theta=theta, offset=offset, dtype=np.float32)
    cos_t, sin_t = _torch_tables(t, d, theta, offset)
    np.testing.assert_allclose(cos, cos_t[0].numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(sin, sin_t[0].numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)


@pytest.mark.parametrize("offset", [0, 5])
def test_forward_and_grads_match_torch(offset):
    rng = np.random.default_rng(4)
    b, h, k_heads, t, d = 2, 4, 2, 6, 16
    q = rng.standard_normal((b, h, t, d)).astype(np.float32)
    k = rng.standard_normal((b, k_heads, t, d)).astype(np.float32)
    dq_out = rng.standard_normal(q.shape).astype(np.float32)
    dk_out = rng.standard_normal(k.shape).astype(np.float32)
    cos, sin = rope_tables(t, d, offset=offset, dtype=np.float32)
    q_rot, q_ctx = rope_forward(q, cos, sin)
    k_rot, k_ctx = rope_forward(k, cos, sin)

    q_t = torch.tensor(q, requires_grad=True)
    k_t = torch.tensor(k, requires_grad=True)
    cos_t, sin_t = _torch_tables(t, d, 10000.0, offset)
    q_rot_t, k_rot_t = _torch_apply(q_t, k_t, cos_t, sin_t)
    torch.autograd.backward([q_rot_t, k_rot_t], [torch.tensor(dq_out), torch.tensor(dk_out)])

    np.testing.assert_allclose(q_rot, q_rot_t.detach().numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(k_rot, k_rot_t.detach().numpy(), rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(rope_backward(dq_out, q_ctx), q_t.grad.numpy(),
                               rtol=TORCH_RTOL, atol=TORCH_ATOL)
    np.testing.assert_allclose(rope_backward(dk_out, k_ctx), k_t.grad.numpy(),
                               rtol=TORCH_RTOL, atol=TORCH_ATOL)


def test_rotate_half_matches_transformers():
    transformers_llama = pytest.importorskip("transformers.models.llama.modeling_llama",
                                             exc_type=ImportError)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = transformers_llama.rotate_half(torch.tensor(x)).numpy()
    np.testing.assert_array_equal(rotate_half(x), want)
