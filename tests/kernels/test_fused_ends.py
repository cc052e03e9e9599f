"""The fused ends of a decoded layer (kernels/decode_numba.py) against their NumPy twins
(kernels/decode_numpy.py): swiglu_down_norm_rows (the MLP's end, its down product streamed by the
kernel) and attend_out_norm_rows (the attention's end, its wo product too). Float32 rounding apart
(the products' sums run in another order than BLAS's), and a row's numbers do not depend on the
other rows (serve --batch-invariant), serial or over numba's threads."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import decode_kernels, numba_importable
from tests.kernels.test_decode_kernels import attend_inputs

PATHS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))]
TOL = dict(rtol=2e-5, atol=2e-5)


def inputs(rows: int, *, width=70, hidden=96, bias=True, norm=True, rms=True, seed=0):
    """gate, up as views of one packed (B, 2F) product, W_down^T (C, F) as a checkpoint loads it
    (the transpose of an (F, C) column-major view), and the residual and next norm."""
    rng = np.random.default_rng(seed)
    both = rng.standard_normal((rows, 2 * hidden), dtype=np.float32) * 2
    down_t = rng.standard_normal((width, hidden), dtype=np.float32) / 8       # (C, F)
    h = rng.standard_normal((rows, width), dtype=np.float32)
    vec = [rng.standard_normal(width, dtype=np.float32) for _ in range(3)]
    return (both[:, :hidden], both[:, hidden:], down_t, vec[0] if bias else None, h,
            vec[1] if norm else None, None if rms or not norm else vec[2], 1e-5, rms)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("bias, norm, rms", [(True, True, True), (False, True, False),
                                             (True, False, True), (False, False, True)])
def test_the_mlp_end_equals_its_twin(path, rows, bias, norm, rms):
    args = inputs(rows, bias=bias, norm=norm, rms=rms)
    x_ref, xn_ref = decode_numpy.swiglu_down_norm_rows(*args)
    kernels = decode_numpy if path == "numpy" else decode_kernels("numba")
    x, xn = kernels.swiglu_down_norm_rows(*args)
    np.testing.assert_allclose(x, x_ref, **TOL)
    assert xn.shape == xn_ref.shape == ((rows, 70) if norm else (rows, 0))
    np.testing.assert_allclose(xn, xn_ref, **TOL)
    h, m = args[4], decode_numpy.swiglu_rows(*args[:2]) @ args[2].T          # the blocks' way
    np.testing.assert_allclose(x, h + m + (args[3] if bias else 0), **TOL)


@pytest.mark.skipif(not numba_importable(), reason="numba is not installed (the fast extra)")
@pytest.mark.parametrize("name", ["_swiglu_down_serial", "_swiglu_down_threads"])
def test_a_row_is_the_same_alone_or_among_others(name):
    fused = getattr(decode_kernels("numba"), name)
    args = inputs(5, width=130)                     # 32 groups of four rows and two more
    x, xn = fused(*args)
    for row in range(5):
        alone = [a[row:row + 1] if isinstance(a, np.ndarray) and a.ndim == 2 and i != 2 else a
                 for i, a in enumerate(args)]
        x_row, xn_row = fused(*alone)
        np.testing.assert_array_equal(x_row[0], x[row])
        np.testing.assert_array_equal(xn_row[0], xn[row])
    np.testing.assert_allclose(x, decode_numpy.swiglu_down_norm_rows(*args)[0], **TOL)


def attention_end_inputs(rows: int, *, width=130, seed=1, **options) -> dict:
    """attend_step's arguments (a grouped-query layer, 6 heads of 8) and wo (48, C) row-major,
    bo, x and the MLP's norm."""
    rng = np.random.default_rng(seed)
    args = attend_inputs(rng, rows=rows, **options)
    floats = [rng.standard_normal(n, dtype=np.float32) for n in (48 * width, width, width)]
    return {**args, "wo": floats[0].reshape(48, width) / 4, "bo": floats[1],
            "x": rng.standard_normal((rows, width), dtype=np.float32), "w": floats[2], "b": None,
            "eps": 1e-5, "rms": True}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("options", [dict(rows=1, masked=False, biases=False),
                                     dict(rows=2, masked=True, biases=True)])
def test_the_attention_end_equals_its_twin(path, options):
    args = attention_end_inputs(**options)
    ref = {**args, "k_cache": args["k_cache"].copy(), "v_cache": args["v_cache"].copy()}
    h_ref, hn_ref = decode_numpy.attend_out_norm_rows(**ref)
    kernels = decode_numpy if path == "numpy" else decode_kernels("numba")
    h, hn = kernels.attend_out_norm_rows(**args)
    np.testing.assert_allclose(h, h_ref, **TOL)
    np.testing.assert_allclose(hn, hn_ref, **TOL)
    np.testing.assert_allclose(args["k_cache"], ref["k_cache"], **TOL)   # the step's key written
    np.testing.assert_allclose(args["v_cache"], ref["v_cache"], **TOL)


@pytest.mark.skipif(not numba_importable(), reason="numba is not installed (the fast extra)")
@pytest.mark.parametrize("name", ["_attend_out_serial", "_attend_out_threads"])
def test_a_row_of_the_attention_end_is_the_same_alone(name):
    fused = getattr(decode_kernels("numba"), name)
    args = attention_end_inputs(3, masked=False)
    h, hn = fused(**{**args, "k_cache": args["k_cache"].copy(), "v_cache": args["v_cache"].copy()})
    for row in range(3):
        alone = {key: value[row:row + 1] if key in ("q", "k", "v", "cos", "sin", "k_cache",
                                                   "v_cache", "x") else value
                 for key, value in args.items()}
        alone["k_cache"], alone["v_cache"] = alone["k_cache"].copy(), alone["v_cache"].copy()
        h_row, hn_row = fused(**alone)
        np.testing.assert_array_equal(h_row[0], h[row])
        np.testing.assert_array_equal(hn_row[0], hn[row])
