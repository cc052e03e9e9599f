"""The prefill's fast path (kernels/prefill.py, on kernels/prefill_numba.py's loops) against its
NumPy twins: tiled attention (out and lse equal to float32 rounding, a ctx the twin's backward
reads), RoPE and SwiGLU. Skipped, with its reason, where numba is not installed."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import numba_importable, prefill_kernels
from glassformer.ops.rope import rope_forward
from glassformer.ops.tiled_attention import tiled_attention_backward, tiled_attention_forward

pytestmark = pytest.mark.skipif(not numba_importable(),
                                reason="numba is not installed (the fast extra)")
TOL = dict(rtol=2e-5, atol=2e-5)


@pytest.fixture
def fast(monkeypatch):
    """kernels/prefill.py with tiles small enough that a short prompt crosses several
    query tiles and key chunks (the results do not depend on them beyond rounding)."""
    module = prefill_kernels("numba")
    monkeypatch.setattr(module, "QUERY_ROWS", 8)
    monkeypatch.setattr(module, "KEY_CHUNK", 16)
    return module


def grouped(rng, *, n=2, n_kv=2, group=3, t=70, s=70, d=8, dv=8, dtype=np.float32):
    """q (N, K, G, T, D), k (N, K, 1, S, D), v (N, K, 1, S, Dv): blocks/attention.py's layout."""
    return (rng.standard_normal((n, n_kv, group, t, d)).astype(dtype),
            rng.standard_normal((n, n_kv, 1, s, d)).astype(dtype),
            rng.standard_normal((n, n_kv, 1, s, dv)).astype(dtype))


@pytest.mark.parametrize("t, s", [(70, 70), (45, 83), (1, 9)])   # a prefill, a cached one, one row
@pytest.mark.parametrize("window", [None, 5, 40])
def test_matches_the_twin(fast, t, s, window):
    q, k, v = grouped(np.random.default_rng(t + s), t=t, s=s)
    out, ctx = fast.tiled_attention_forward(q, k, v, causal=True, window=window, scale=0.4)
    ref, ref_ctx = tiled_attention_forward(q, k, v, causal=True, window=window, scale=0.4)
    np.testing.assert_allclose(out, ref, **TOL)
    np.testing.assert_allclose(ctx.lse, ref_ctx.lse, **TOL)
    assert out.shape == ref.shape and ctx.lse.shape == ref_ctx.lse.shape
    assert (ctx.scale, ctx.window, ctx.causal) == (0.4, window, True)


def test_default_scale_and_one_query_head_per_kv_head(fast):
    q, k, v = grouped(np.random.default_rng(3), n=1, n_kv=4, group=1, t=50, s=50, d=16, dv=4)
    out, ctx = fast.tiled_attention_forward(q, k, v, causal=True)
    ref, ref_ctx = tiled_attention_forward(q, k, v, causal=True)
    np.testing.assert_allclose(out, ref, **TOL)
    np.testing.assert_allclose(ctx.lse, ref_ctx.lse, **TOL)


def test_huge_scores_are_redone_by_the_twin(fast):
    """Scores beyond 2^64 overflow the unshifted sums: those tiles are the twin's, still exact."""
    q, k, v = grouped(np.random.default_rng(4), t=40, s=40)
    q[0, 1, :, 20:] *= 60.0
    out, ctx = fast.tiled_attention_forward(q, k, v, causal=True)
    ref, ref_ctx = tiled_attention_forward(q, k, v, causal=True)
    np.testing.assert_allclose(out, ref, **TOL)
    np.testing.assert_allclose(ctx.lse, ref_ctx.lse, rtol=2e-5, atol=1e-3)
    assert np.isfinite(out).all()


@pytest.mark.parametrize("options", [dict(causal=False), dict(causal=True, softcap=5.0),
                                     dict(causal=True, sinks=np.zeros((2, 3, 1, 1), np.float32)),
                                     dict(causal=True, mask=np.ones((1, 1, 1, 1, 70), bool))])
def test_other_options_run_the_twin(fast, options):
    q, k, v = grouped(np.random.default_rng(5))
    out, _ = fast.tiled_attention_forward(q, k, v, **options)
    np.testing.assert_array_equal(out, tiled_attention_forward(q, k, v, **options)[0])


def test_float64_and_shorter_keys_run_the_twin(fast):
    q, k, v = grouped(np.random.default_rng(6), dtype=np.float64)
    assert not fast.supports(q, k, v, dict(causal=True))
    q, k, v = grouped(np.random.default_rng(6), t=20, s=10)      # S < T: rows that see nothing
    assert not fast.supports(q, k, v, dict(causal=True))
    np.testing.assert_array_equal(fast.tiled_attention_forward(q, k, v, causal=True)[0],
                                  tiled_attention_forward(q, k, v, causal=True)[0])


def test_the_twins_backward_reads_its_ctx(fast):
    rng = np.random.default_rng(7)
    q, k, v = grouped(rng, t=37, s=37)
    dout = rng.standard_normal((2, 2, 3, 37, 8)).astype(np.float32)
    grads = tiled_attention_backward(dout, fast.tiled_attention_forward(q, k, v, causal=True)[1])
    expected = tiled_attention_backward(dout, tiled_attention_forward(q, k, v, causal=True)[1])
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_exp2_is_float32_accurate():
    module = prefill_kernels("numba")
    x = np.linspace(-126.0, 64.0, 20001).astype(np.float32)
    scores = x[None].copy()
    total = np.zeros(1, np.float32)
    module.prefill_numba.exp_rows(scores, 1, 10**6, 0, 0, total)               # every column seen
    exact = np.exp2(x.astype(np.float64))
    np.testing.assert_allclose(scores[0], exact, rtol=3e-7, atol=0)
    scores = np.array([[-np.inf, -200.0, 0.0]], np.float32)
    module.prefill_numba.exp_rows(scores, 1, 10**6, 0, 0, total)
    assert scores[0].tolist() == [0.0, 0.0, 1.0]


def test_swiglu_rows_of_a_packed_product():
    """gate and up as column halves of one (B, T, 2F) product, as blocks/mlp.py hands them."""
    module = prefill_kernels("numba")
    both = (np.random.default_rng(8).standard_normal((2, 5, 2 * 24)) * 6).astype(np.float32)
    gate, up = both[..., :24], both[..., 24:]
    expected = decode_numpy.swiglu_rows(gate, up)
    np.testing.assert_allclose(module.swiglu_rows(gate, up), expected, rtol=2e-6, atol=1e-6)
    apart = gate.copy(), up.copy()                               # two arrays: rows as given
    np.testing.assert_allclose(module.swiglu_rows(*apart), expected, rtol=2e-6, atol=1e-6)
    swapped = module.swiglu_rows(up, gate)                       # halves the other way round
    np.testing.assert_allclose(swapped, decode_numpy.swiglu_rows(up, gate), rtol=2e-6,
                               atol=1e-6)
    gate64 = gate.astype(np.float64)                             # float64: the twin
    assert module.swiglu_rows(gate64, up.astype(np.float64)).dtype == np.float64


def test_rope_forward_on_a_head_view():
    """x (B, H, T, D) as a transposed view of (B, T, H, D), as blocks/heads.py splits it."""
    module = prefill_kernels("numba")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 7, 3, 8)).astype(np.float32).transpose(0, 2, 1, 3)
    cos, sin = (f(rng.standard_normal((7, 8))).astype(np.float32) for f in (np.cos, np.sin))
    out, ctx = module.rope_forward(x, cos, sin)
    expected, _ = rope_forward(x, cos, sin)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert ctx.cos is cos and ctx.sin is sin
    per_row = np.broadcast_to(cos, (2, 1, 7, 8))                 # per-row tables: the twin
    np.testing.assert_array_equal(module.rope_forward(x, per_row, per_row)[0],
                                  rope_forward(x, per_row, per_row)[0])


def test_a_nan_is_not_hidden(fast):
    """A NaN score's row is NaN, as the twin's: the kernel's exp passes NaN on."""
    q, k, v = grouped(np.random.default_rng(10), t=40, s=40)
    k[1, 0, 0, 3, 2] = np.nan
    out, _ = fast.tiled_attention_forward(q, k, v, causal=True)
    ref, _ = tiled_attention_forward(q, k, v, causal=True)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    assert np.isnan(out[1, 0]).any() and not np.isnan(out[0]).any()


@pytest.mark.parametrize("threads", [1, 2])
def test_tiles_spread_over_threads_give_the_same_numbers(fast, threads):
    """kernels/spread.py: the query tiles of all heads over numba's thread count (BLAS at one
    thread inside), each tile computed as alone: the twin's numbers at any count."""
    from glassformer.blas import blas_threads

    q, k, v = grouped(np.random.default_rng(11), t=90, s=90)
    ref, ref_ctx = tiled_attention_forward(q, k, v, causal=True, window=30)
    with blas_threads(threads):
        out, ctx = fast.tiled_attention_forward(q, k, v, causal=True, window=30)
    np.testing.assert_allclose(out, ref, **TOL)
    np.testing.assert_allclose(ctx.lse, ref_ctx.lse, **TOL)


def test_an_error_in_one_item_reaches_the_caller():
    from glassformer.kernels.spread import spread

    done = []

    def work(item, scratch):
        if item == 3:
            raise ValueError("item 3")
        done.append(item)

    with pytest.raises(ValueError, match="item 3"):
        spread(range(8), work, 2, list)
    assert 3 not in done
    seen = []
    spread(range(5), lambda item, scratch: seen.append(item), 1, list)     # one thread: in order
    assert seen == list(range(5))


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_give_the_twins_numbers_at_any_thread_count(threads):
    """RoPE, SwiGLU and RMSNorm over a prefill's many rows, at one and two threads: the row
    loops' numbers are the NumPy twins'."""
    from glassformer.blas import blas_threads
    from glassformer.kernels.choice import train_kernels
    from glassformer.ops.rms_norm import rms_norm_forward

    module, train = prefill_kernels("numba"), train_kernels("numba")
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 3, 100, 16)).astype(np.float32)
    cos, sin = (f(rng.standard_normal((100, 16))).astype(np.float32) for f in (np.cos, np.sin))
    both = (rng.standard_normal((1, 100, 2 * 40)) * 4).astype(np.float32)
    rows = rng.standard_normal((100, 24)).astype(np.float32)
    w = rng.standard_normal(24).astype(np.float32)
    with blas_threads(threads):
        rotated = module.rope_forward(x, cos, sin)[0]
        hidden = module.swiglu_rows(both[..., :40], both[..., 40:])
        normed = train.rms_norm_forward(rows, w, eps=1e-5)[0]
    np.testing.assert_allclose(rotated, rope_forward(x, cos, sin)[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hidden, decode_numpy.swiglu_rows(both[..., :40], both[..., 40:]),
                               rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(normed, rms_norm_forward(rows, w, eps=1e-5)[0], rtol=1e-5,
                               atol=1e-6)


def test_expf_is_float32_accurate():
    """kernels/exp_numba.py's expf, the one exponential the SiLU, GELU and softmax loops share
    (exp2f, the attention's, is checked above through exp_rows)."""
    from glassformer.kernels.activation_numba import swiglu_rows

    gate = np.linspace(-80.0, 80.0, 20001).astype(np.float32)
    got = swiglu_rows(gate, np.ones_like(gate))             # silu(g) = g / (1 + e^-g)
    exact = gate.astype(np.float64) / (1.0 + np.exp(-gate.astype(np.float64)))
    np.testing.assert_allclose(got, exact, rtol=5e-7, atol=1e-30)
