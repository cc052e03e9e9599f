"""layer_step (kernels/decode_layer_numba.py: one decoded row's whole layer in one compiled call,
its products NumPy's BLAS called from the loop, kernels/blas_numba.py) against its NumPy twin
(kernels/decode_numpy.py): the same output, next norm and cache columns to float32 rounding, for
a SwiGLU and both GELUs, with biases or none, the down product by BLAS or by the loop."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.decode_plan import one_unit_stride
from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import decode_layer_kernel, numba_importable

pytestmark = pytest.mark.skipif(not numba_importable(),
                                reason="numba is not installed (the fast extra)")
C, H, K, D, F, T = 48, 4, 2, 12, 80, 16
TOL = dict(rtol=3e-5, atol=3e-5)


def compiled_layer():
    layer = decode_layer_kernel("numba")
    if layer is None:
        pytest.skip("NumPy's BLAS cannot be called from a compiled loop here (blas_numba.FOUND)")
    return layer


def operands(mlp: int, biases: bool, seed: int = 0):
    """layer_step's arguments for one row at cache column 5; w_down (F, C) as a checkpoint loads
    it (the transpose view of a row-major (C, F))."""
    rng = np.random.default_rng(seed)
    def floats(*shape, scale=1.0):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    width = (H + 2 * K) * D
    bias = (lambda n: floats(n, scale=0.1)) if biases else (lambda n: None)
    x = floats(1, C)
    xn = decode_numpy.norm_rows(x, floats(C), None, 1e-5, True)
    cos, sin = floats(1, D), floats(1, D)
    up = floats(C, 2 * F if mlp == 0 else F, scale=0.2)
    return [x, xn, floats(C, width, scale=0.2), H * D, K * D, bias(H * D), bias(K * D),
            bias(K * D), cos, sin, floats(1, K, T, D), floats(1, K, T, D), 5, None,
            floats(H * D, C, scale=0.2), bias(C), floats(C), None, up,        # RMSNorm: no shift
            bias(F) if mlp else None, mlp, np.ascontiguousarray(floats(F, C, scale=0.2).T).T,
            bias(C), False, floats(C), None, 1e-5, True]


@pytest.mark.parametrize("mlp", [0, 1, 2])
@pytest.mark.parametrize("biases", [True, False])
@pytest.mark.parametrize("own_down", [False, True])
def test_the_whole_layer_equals_its_twin(mlp, biases, own_down):
    layer = compiled_layer()
    args = operands(mlp, biases)
    mine, theirs = list(args), list(args)
    mine[10], mine[11] = args[10].copy(), args[11].copy()          # each its own cache
    mine[23] = own_down
    x, xn = layer(*mine)
    x_ref, xn_ref = decode_numpy.layer_step(*theirs)
    np.testing.assert_allclose(x, x_ref, **TOL)
    np.testing.assert_allclose(xn, xn_ref, **TOL)
    np.testing.assert_allclose(mine[10][:, :, 5], theirs[10][:, :, 5], **TOL)   # keys written
    np.testing.assert_array_equal(mine[11][:, :, 5], theirs[11][:, :, 5])     # values


def test_the_last_layer_gives_an_empty_norm():
    layer = compiled_layer()
    args = operands(0, False)
    args[24] = None                                                 # no next norm
    x, xn = layer(*args)
    assert xn.shape == (1, 0) and x.shape == (1, C)


@pytest.mark.parametrize("layout", ["row-major", "transposed", "column slice"])
def test_a_blas_product_from_the_loop_equals_numpy(layout):
    compiled_layer()
    from glassformer.kernels.blas_numba import matvec_into
    rng = np.random.default_rng(3)
    w = rng.standard_normal((37, 53), dtype=np.float32)
    w = {"row-major": w, "transposed": np.ascontiguousarray(w.T).T,
         "column slice": w[:, 5:40]}[layout]
    assert one_unit_stride(w)
    x = rng.standard_normal(37, dtype=np.float32)
    y = np.empty(w.shape[1], np.float32)
    matvec_into(x, w, y)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_layouts_blas_cannot_take_are_refused():
    w = np.ones((6, 8), np.float32)
    assert not one_unit_stride(w[:, ::2]) and not one_unit_stride(w.astype(np.float64))
    assert not one_unit_stride(None) and one_unit_stride(w.T)
