"""The compiled quantized products (kernels/quant_numba.py) against their NumPy reference
(ops/quant/product.py's rows_t_product), on both paths, and a decode on quantized weights.

Tolerance: the two widen the same weights (fastmath may fuse q4_1's d * q + m into one rounding)
and sum in different orders, so each output may differ by TOL times sum_c |x_c| |w_c|, the bound
of a float32 sum's rounding error (measured: at most 1.7e-7 of it here; TOL = 2e-6, about 16
float32 epsilons). Skipped, with its reason, where numba is not installed (the default install).
"""
from __future__ import annotations

import numpy as np
import pytest

import glassformer.models.common as common
from glassformer.generate.generate import generate
from glassformer.kernels.choice import KERNELS_ENV, numba_importable, quant_kernels
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.ops.quant import FORMATS, quantize_matrix, quantize_weight
from glassformer.ops.quant.product import rows_t_product

NEEDS_NUMBA = pytest.mark.skipif(not numba_importable(),
                                 reason="numba is not installed (the fast extra)")
PATHS = ["numpy", pytest.param("numba", marks=NEEDS_NUMBA)]
TOL = 2e-6


def product_of(path: str):
    """The product under test: the compiled twin, or the reference itself (a check of the test)."""
    return rows_t_product if path == "numpy" else quant_kernels("numba").rows_t_product


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", sorted(FORMATS))
@pytest.mark.parametrize("n", [1, 3, 16])
def test_product_matches_the_reference(path, kind, n):
    rng = np.random.default_rng(n)
    cols = 512 if kind == "q4_k" else 96                                 # whole blocks a row
    w = rng.standard_normal((40, cols), dtype=np.float32)
    w[3] = 0.0                                                           # a zero scale too
    m = quantize_matrix(w, kind)
    x = rng.standard_normal((n, cols), dtype=np.float32)
    got = product_of(path)(x, kind, m.blocks, cols)                     # (n, 40)
    expected = rows_t_product(x, kind, m.blocks, cols)
    bound = np.abs(x) @ np.abs(m.dequantize()).T                         # (n, 40)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert (np.abs(got - expected) <= TOL * bound + 1e-30).all()


@pytest.mark.parametrize("path", PATHS)
def test_scales_of_every_float16_magnitude(path):
    """Q8_0 blocks whose scales run over the finite float16 patterns (zeros, subnormals, the
    largest), each with code 1 at its own column: the product reads each scale exactly."""
    halves = np.arange(0, 65536, 7, dtype=np.uint32).astype(np.uint16).view(np.float16)
    halves = halves[np.isfinite(halves)]                                 # (S,)
    blocks = np.zeros((len(halves), 34), np.uint8)
    blocks[:, :2] = halves.view(np.uint8).reshape(-1, 2)
    blocks[:, 2] = 1                                                     # w = d at column 0
    cols = 32 * len(halves)
    one_row = blocks.reshape(1, -1)                                      # (1, S * 34)
    for picked in (np.arange(16), np.arange(len(halves) - 16, len(halves))):
        x = np.zeros((16, cols), np.float32)
        x[np.arange(16), 32 * picked] = 1.0                              # row i reads one block
        got = product_of(path)(x, "q8_0", one_row, cols)[:, 0]           # (16,)
        assert np.array_equal(got, halves[picked].astype(np.float32))


@pytest.mark.parametrize("path", PATHS)
def test_the_matrix_product_dispatches_by_the_choice(monkeypatch, path):
    """x @ M on a QuantizedMatrix: few float32 rows follow GLASSFORMER_KERNELS; many rows and the
    backward's dy @ W stay on the reference, bit for bit."""
    monkeypatch.setenv(KERNELS_ENV, path)
    rng = np.random.default_rng(0)
    m = quantize_weight(rng.standard_normal((64, 24), dtype=np.float32), "q4_1")   # (in, out)
    x = rng.standard_normal((2, 1, 64), dtype=np.float32)
    reference = rows_t_product(x.reshape(2, 64), "q4_1", m.blocks, 64).reshape(2, 1, 24)
    np.testing.assert_allclose(x @ m, reference, rtol=0, atol=1e-5)
    many = rng.standard_normal((17, 64), dtype=np.float32)
    assert np.array_equal(many @ m, rows_t_product(many, "q4_1", m.blocks, 64))


def quantized_llama() -> Model:
    """A tiny LLaMA whose projections and tied embedding are Q8_0 blocks."""
    cfg = llama.LlamaConfig(vocab_size=48, n_layer=2, n_head=2, n_kv_head=1, d_model=64,
                            d_ff=96, tie_embeddings=True)
    params = llama.init_params(cfg, np.random.default_rng(0))
    for name, value in list(params.items()):
        if name == "tok_emb":
            params[name] = quantize_matrix(value, "q8_0")                # (V, C), rows = tokens
        elif value.ndim == 2 and value.shape[0] % 32 == 0:
            params[name] = quantize_weight(value, "q8_0")                # (in, out) -> W^T
    return Model(cfg, params)


@NEEDS_NUMBA
def test_fused_decode_step_runs_on_quantized_weights(monkeypatch):
    """Greedy decode of a quantized model: the fused step (blocks/decode_step.py) with the compiled
    products gives the tokens of the reference path (the blocks, NumPy products)."""
    model = quantized_llama()
    prompt = np.array([[1, 2, 3, 4]])
    monkeypatch.setenv(KERNELS_ENV, "numpy")
    reference = [t.tolist() for t in generate(model, prompt, max_new_tokens=6, temperature=0.0)]
    calls = []
    fused = common.decode_step_forward
    monkeypatch.setattr(common, "decode_step_forward",
                        lambda *a, **k: calls.append(1) or fused(*a, **k))
    monkeypatch.setenv(KERNELS_ENV, "numba")
    fast = [t.tolist() for t in generate(model, prompt, max_new_tokens=6, temperature=0.0)]
    assert fast == reference and len(calls) == 5                        # every cached step fused


@NEEDS_NUMBA
@pytest.mark.parametrize("kind", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("threaded", [False, True])
def test_fused_four_row_products_and_their_threaded_twins(kind, threaded):
    """The block-sum products read four rows of W at a time; 67 rows leave a tail group of
    three (its last row repeated), and the threaded twins split the groups over threads."""
    compiled = quant_kernels("numba")
    rng = np.random.default_rng(7)
    w = rng.standard_normal((67, 96), dtype=np.float32) + 0.5            # minimums far from 0
    m = quantize_matrix(w, kind)
    for n in (1, 5):
        x = rng.standard_normal((n, 96), dtype=np.float32)
        y = np.full((n, 67), np.nan, np.float32)
        run = (compiled.THREADED if threaded else compiled.PRODUCTS)[kind]
        run(x, m.blocks, compiled.HALF_VALUES, y)
        expected = rows_t_product(x, kind, m.blocks, 96)
        bound = np.abs(x) @ np.abs(m.dequantize()).T
        assert (np.abs(y - expected) <= TOL * bound + 1e-30).all()


@NEEDS_NUMBA
@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_compiled_widening_equals_the_reference_bit_for_bit(kind):
    """quant_slabs.widen_rows widens as dequantize_rows does (gguf's roundings, no fastmath), so
    the many-row products on it equal the reference's exactly, both directions."""
    from glassformer.kernels.choice import quant_slab_kernels
    from glassformer.ops.quant.product import dequantize_rows, rows_product
    slabs = quant_slab_kernels("numba")
    rng = np.random.default_rng(11)
    cols = 512 if kind == "q4_k" else 96
    w = rng.standard_normal((45, cols), dtype=np.float32) * 3.0 - 1.0
    w[2] = 0.0
    m = quantize_matrix(w, kind)
    assert np.array_equal(slabs.widen_rows(kind, m.blocks, cols),
                          dequantize_rows(kind, m.blocks, cols))
    x = rng.standard_normal((40, cols), dtype=np.float32)
    assert np.array_equal(slabs.rows_t_product(x, kind, m.blocks, cols),
                          rows_t_product(x, kind, m.blocks, cols))
    dy = rng.standard_normal((40, 45), dtype=np.float32)
    assert np.array_equal(slabs.rows_product(dy, kind, m.blocks, cols),
                          rows_product(dy, kind, m.blocks, cols))


@NEEDS_NUMBA
def test_numba_threads_follow_blas_threads():
    """blas_threads(n) sets the threaded products' count too (numba's), and puts it back."""
    import numba

    from glassformer.blas import blas_threads
    quant_kernels("numba")
    before = numba.get_num_threads()
    with blas_threads(1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
