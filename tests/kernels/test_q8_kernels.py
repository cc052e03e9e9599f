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
    """x @ M with activations="q8": one row or many (a prefill) on the chosen path; the same
    bits either way (the kernel is bit-exact)."""
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


@pytest.mark.parametrize("kind", ["q8_0", "q4_0", "q5_0", "q4_1"])
@pytest.mark.parametrize("threaded", [False, True])
def test_four_row_groups_and_their_threaded_twin_bit_for_bit(kind, threaded):
    """Four rows of W at a time: 67 rows leave a tail group of three (its last row repeated);
    the threaded twin splits the groups over threads. The same bits as the NumPy twin."""
    kernels = q8_kernels("numba")
    rng = np.random.default_rng(5)
    w = rng.standard_normal((67, 96), dtype=np.float32) + 0.5            # minimums far from 0
    blocks = quantize_matrix(w, kind).blocks
    x = rng.standard_normal((2, 96), dtype=np.float32)
    got = kernels.q8_product(x, kernels.CODE[kind], kernels.BYTES[kind], blocks,
                             kernels.HALF_VALUES, threaded)
    assert np.array_equal(got, aq.activation_product(x, kind, blocks, 96))


def test_block_dots_are_the_exact_integers():
    """int8_dots' SIMD block sums against NumPy's integer sums, the extremes included: Q8_0
    codes -128 and 127 (the sign trick), nibbles 0 and 15, x codes -127 and 127."""
    import numba

    from glassformer.kernels.int8_dots import dot_fives, dot_int8, dot_nibbles

    @numba.njit
    def run(x, w8, w4, w5):
        out = np.zeros((3, 4), np.int64)
        for b in range(4):
            out[0, b] = dot_int8(x, b * 32, w8, b * 34 + 2)
            out[1, b] = dot_nibbles(x, b * 32, w4, b * 20 + 4)
            out[2, b] = dot_fives(x, b * 32, w5, b * 22 + 2)
        return out

    rng = np.random.default_rng(2)
    x = rng.integers(-127, 128, 128).astype(np.int8)
    x[32:64] = 127
    x[64:96] = -127
    w8, w4, w5 = (rng.integers(0, 256, 4 * size).astype(np.uint8) for size in (34, 20, 22))
    w8[36:68] = 128                                                      # int8 -128
    w8[70:102], w4[24:40], w5[28:48] = 127, 255, 255
    codes = x.astype(np.int64).reshape(4, 32)

    def nibbles(b):
        return np.concatenate([b & 15, b >> 4]).astype(np.int64)

    for b in range(4):
        int8 = w8[b * 34 + 2: b * 34 + 34].view(np.int8).astype(np.int64)
        bits = np.unpackbits(w5[b * 22 + 2: b * 22 + 6], bitorder="little").astype(np.int64)
        fives = nibbles(w5[b * 22 + 6: b * 22 + 22]) | (bits << 4)
        expected = [int8 @ codes[b], nibbles(w4[b * 20 + 4: b * 20 + 20]) @ codes[b],
                    fives @ codes[b]]
        assert run(x, w8, w4, w5)[:, b].tolist() == expected


def test_half_at_reads_every_float16_exactly():
    """int8_dots.half_at (a register conversion where the CPU has one, else the table) gives
    NumPy's float32 value of every float16 bit pattern (NaNs as NaN)."""
    import numba

    from glassformer.kernels.int8_dots import half_at
    from glassformer.kernels.quant_numba import HALF_VALUES

    @numba.njit
    def read_all(raw, halves):
        out = np.empty(raw.size // 2, np.float32)
        for k in range(out.size):
            out[k] = half_at(raw, 2 * k, halves)
        return out

    bits = np.arange(1 << 16, dtype=np.uint32).astype("<u2")
    got = read_all(bits.view(np.uint8), HALF_VALUES)
    expected = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan) and np.array_equal(got[~nan], expected[~nan])


@pytest.mark.parametrize("kind", ["q8_0", "q4_1"])
def test_a_rows_bits_are_its_own_among_pairs_of_rows(kind):
    """Two or more rows go two at a time (`_four_pairs`, an odd last row paired with itself):
    a row's outputs are the bits it gets alone (`_four`), at any place among 2..8 rows."""
    kernels = q8_kernels("numba")
    rng = np.random.default_rng(9)
    blocks = quantize_matrix(rng.standard_normal((70, 96), dtype=np.float32), kind).blocks
    row = rng.standard_normal((1, 96), dtype=np.float32)
    args = (kernels.CODE[kind], kernels.BYTES[kind], blocks, kernels.HALF_VALUES)
    alone = kernels.q8_product(row, *args, False)[0]
    for n in (2, 3, 7, 8):
        for at in (0, n - 1):
            x = rng.standard_normal((n, 96), dtype=np.float32)
            x[at] = row[0]
            assert np.array_equal(kernels.q8_product(x, *args, n == 8)[at], alone), (n, at)
