"""The few-row quantized products (kernels/quant_rows_numba.py: 2..16 rows of x, each block
unpacked once for all of them) against their NumPy reference (ops/quant/product.py's
rows_t_product), a row's bits independent of the rows beside it, and the dispatch of `x @ M`.

Tolerance: the tile is widened to the reference's floats exactly, and the dots are summed in
SIMD order, not BLAS's: each output may differ by TOL times sum_c |x_c| |w_c| (a float32 sum's
rounding bound; TOL = 2e-6 as tests/kernels/test_quant_kernels.py). Skipped, with its reason,
where numba is not installed (the default install).
"""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.kernels.choice import KERNELS_ENV, numba_importable, quant_rows_kernels
from glassformer.ops.quant import quantize_matrix, quantize_weight
from glassformer.ops.quant.product import dequantize_rows, rows_t_product

pytestmark = pytest.mark.skipif(not numba_importable(),
                                reason="numba is not installed (the fast extra)")
TOL = 2e-6
KINDS = ["q8_0", "q4_0", "q4_1"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("rows", [40, 67])        # 67: a tail tile of 3 rows, and threaded
def test_product_matches_the_reference(kind, n, rows):
    kernels = quant_rows_kernels("numba")
    rng = np.random.default_rng(n + rows)
    w = rng.standard_normal((rows, 96), dtype=np.float32)
    w[3] = 0.0                                                           # a zero scale too
    m = quantize_matrix(w, kind)
    x = rng.standard_normal((n, 96), dtype=np.float32)
    got = kernels.rows_t_product(x, kind, m.blocks, 96)                 # (n, rows)
    expected = rows_t_product(x, kind, m.blocks, 96)
    bound = np.abs(x) @ np.abs(m.dequantize()).T                         # (n, rows)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert (np.abs(got - expected) <= TOL * bound + 1e-30).all()


@pytest.mark.parametrize("kind", KINDS)
def test_the_widened_tile_is_the_references_floats(kind):
    kernels = quant_rows_kernels("numba")
    rng = np.random.default_rng(5)
    m = quantize_matrix(rng.standard_normal((6, 64), dtype=np.float32) * 7, kind)
    tile = np.empty((kernels.TILE, 64), np.float32)
    kernels._widen(m.blocks, kernels.HALF_VALUES, 4, kernels.SIZES[kind], tile)   # rows 4, 5, 5, 5
    expected = dequantize_rows(kind, m.blocks, 64)
    assert np.array_equal(tile, expected[[4, 5, 5, 5]])


@pytest.mark.parametrize("kind", KINDS)
def test_a_rows_bits_do_not_depend_on_the_rows_beside_it(kind):
    """The same row of x alone among 2..16 rows, at any place: the same bits (serve
    --batch-invariant on a quantized model)."""
    kernels = quant_rows_kernels("numba")
    rng = np.random.default_rng(2)
    m = quantize_matrix(rng.standard_normal((70, 160), dtype=np.float32), kind)
    row = rng.standard_normal(160, dtype=np.float32)
    first = None
    for n in (2, 3, 7, 8, 16):
        for at in (0, n // 2, n - 1):
            x = rng.standard_normal((n, 160), dtype=np.float32)
            x[at] = row
            got = kernels.rows_t_product(x, kind, m.blocks, 160)[at]
            first = got if first is None else first
            assert np.array_equal(got, first), (n, at)


@pytest.mark.parametrize("path", ["numpy", "numba"])
def test_the_matrix_product_sends_several_rows_here(monkeypatch, path):
    """x @ M for 2..16 float32 rows: this kernel on numba (its exact values), the reference on
    numpy; Q4_K keeps quant_numba.py's one-row loops (within tolerance of the reference)."""
    monkeypatch.setenv(KERNELS_ENV, path)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 256), dtype=np.float32)
    m = quantize_weight(rng.standard_normal((256, 24), dtype=np.float32), "q4_1")   # (in, out)
    expected = (quant_rows_kernels("numba").rows_t_product if path == "numba"
                else rows_t_product)(x, "q4_1", m.blocks, 256)
    assert np.array_equal(x @ m, expected)
    k = quantize_weight(rng.standard_normal((256, 24), dtype=np.float32), "q4_k")
    np.testing.assert_allclose(x @ k, rows_t_product(x, "q4_k", k.blocks, 256), rtol=0,
                               atol=1e-4)


def test_threads_give_the_same_bits_as_one():
    """The prange twin splits the tiles over threads; each output is still one tile's sums."""
    import numba
    kernels = quant_rows_kernels("numba")
    rng = np.random.default_rng(4)
    m = quantize_matrix(rng.standard_normal((203, 64), dtype=np.float32), "q4_1")
    x = rng.standard_normal((5, 64), dtype=np.float32)
    y_one, y_two = np.empty((5, 203), np.float32), np.empty((5, 203), np.float32)
    kernels.product(x, m.blocks, kernels.HALF_VALUES, y_one, kernels.SIZES["q4_1"])
    kernels.product_threads(x, m.blocks, kernels.HALF_VALUES, y_two, kernels.SIZES["q4_1"],
                            min(2, numba.config.NUMBA_NUM_THREADS))
    assert np.array_equal(y_one, y_two)
