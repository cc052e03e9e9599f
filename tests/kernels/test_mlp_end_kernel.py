"""swiglu_down_norm_rows (kernels/decode_numba.py) against its NumPy twin (kernels/decode_numpy.py):
the MLP's end in one call, its down product streamed by the kernel. Float32 rounding apart (the
down product's sums run in another order than BLAS's), and a row's numbers do not depend on the
other rows (serve --batch-invariant), serial or over numba's threads."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import decode_kernels, numba_importable

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
@pytest.mark.parametrize("name", ["_swiglu_down_serial"])
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
