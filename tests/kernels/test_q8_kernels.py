"""The compiled 8-bit activation products (kernels/q8_numba.py) against their NumPy twin
(ops/quant/activations_q8.py): equal bit for bit (no fastmath; the same sums in the same order),
the float16 rounding by hand equal to NumPy's, and the dispatch of `x @ M` with activations="q8".
Skipped, with its reason, where numba is not installed (the default install).
"""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.generate.generate import generate
from glassformer.kernels.choice import KERNELS_ENV, numba_importable, q8_kernels
from glassformer.models.model import Model
from glassformer.ops.quant import activations_q8 as aq, quantize_matrix, quantize_weight
from glassformer.ops.quant.matrix import with_activations

pytestmark = pytest.mark.skipif(not numba_importable(),
                                reason="numba is not installed (the fast extra)")


def test_float16_rounding_by_hand_equals_numpys():
    kernels = q8_kernels("numba")
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(3000) * 10.0 ** rng.integers(-10, 6, 3000)).astype(np.float32)
    edges = np.array([0.0, -0.0, 65504, 65519, 65520, -65520, 2.0 ** -24, 2.0 ** -25,
                      1.5 * 2.0 ** -25, 2.0 ** -14, 6.0e-5, 1e-9], np.float32)
    for v in np.concatenate([values, edges]):
        with np.errstate(over="ignore"):
            expected = np.float32(np.float16(v))
        assert kernels._to_half(v) == expected or (np.isinf(expected) and
                                                   kernels._to_half(v) == expected)


@pytest.mark.parametrize("kind", ["q8_0", "q4_0", "q5_0", "q4_1"])
@pytest.mark.parametrize("n", [1, 3, 16])
def test_compiled_equals_the_numpy_twin_bit_for_bit(kind, n):
    rng = np.random.default_rng(n)
    w = rng.standard_normal((40, 160), dtype=np.float32)
    w[3] = 0.0                                                           # zero scales
    blocks = quantize_matrix(w, kind).blocks
    x = rng.standard_normal((n, 160), dtype=np.float32) * 3
    x[0, :32] = 0.0                                                      # a zero activation block
    x[-1, 32:64] *= np.float32(1e-6)                                     # float16-subnormal d
    got = q8_kernels("numba").activation_product(x, kind, blocks, 160)
    assert np.array_equal(got, aq.activation_product(x, kind, blocks, 160))


@pytest.mark.parametrize("path", ["numpy", "numba"])
def test_the_matrix_product_runs_the_8_bit_path(monkeypatch, path):
    """x @ M with activations="q8": a few rows on the chosen path, many on the NumPy twin; the
    same bits either way (the kernel is bit-exact)."""
    monkeypatch.setenv(KERNELS_ENV, path)
    rng = np.random.default_rng(1)
    m = with_activations({"w": quantize_weight(rng.standard_normal((64, 24), dtype=np.float32),
                                               "q4_1")}, "q8")["w"]
    for rows in (1, 17):
        x = rng.standard_normal((rows, 64), dtype=np.float32)
        assert np.array_equal(x @ m, aq.activation_product(x, "q4_1", m.blocks, 64))
        assert np.array_equal(x @ m.T.T, x @ m)                          # .T keeps the setting


def test_greedy_decode_is_the_same_on_both_paths(monkeypatch):
    from tests.ops.quant.test_activations_q8 import tiny_q4_1_llama
    base = tiny_q4_1_llama()
    model = Model(base.cfg, with_activations(base.params, "q8"))
    prompt = np.array([[1, 2, 3, 4]])
    monkeypatch.setenv(KERNELS_ENV, "numpy")
    reference = [t.tolist() for t in generate(model, prompt, max_new_tokens=6, temperature=0.0)]
    monkeypatch.setenv(KERNELS_ENV, "numba")
    fast = [t.tolist() for t in generate(model, prompt, max_new_tokens=6, temperature=0.0)]
    assert fast == reference
