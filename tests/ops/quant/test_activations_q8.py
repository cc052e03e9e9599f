"""llama.cpp's 8-bit activation product (ops/quant/activations_q8.py), the NumPy reference:
the activation blocks follow their formula, the block products are exact integer arithmetic with
one scale a block, and a small quantized model with activations="q8" stays close to float32.
"""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.ops.quant import activations_q8 as aq, quantize_matrix, quantize_weight
from glassformer.ops.quant.matrix import with_activations
from glassformer.ops.quant.product import rows_t_product

f32 = np.float32


def blocks_of(kind: str, rows: int, cols: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    w[1] = 0.0                                                           # a zero block's scale
    return quantize_matrix(w, kind).blocks


@pytest.mark.parametrize("kind", ["q8_0", "q4_1"])
def test_q8_0_and_q8_1_blocks_follow_their_formula(kind):
    """d = float16(max|x| / 127), q = x * (127 / max|x|) rounded half to even; Q8_1's
    s = float16(d * sum q), d before its float16 rounding; an all-zero block is all zero."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 96), dtype=np.float32)
    x[0, 32:64] = 0.0
    x[1, :32] = np.arange(32, dtype=np.float32) - 16                   # max 16: halves appear
    q = aq.quantize_activations(x, kind)
    for i in range(3):
        for b in range(3):
            block = x[i, 32 * b: 32 * b + 32]
            top = np.abs(block).max()
            inv = f32(127) / top if top else f32(0)
            codes = np.rint(block * inv).astype(np.int8)
            assert np.array_equal(q.codes[i, 32 * b: 32 * b + 32], codes)
            assert q.d[i, b] == np.float16(top / f32(127)).astype(np.float32)
            expected_s = np.float16((top / f32(127)) * f32(codes.sum())) if kind == "q4_1" else 0
            assert q.s[i, b] == np.float32(expected_s)
    assert not q.codes[0, 32:64].any() and q.d[0, 1] == 0
    assert np.abs(q.codes).max() == 127


def test_q8_k_blocks_follow_their_formula():
    """Q8_K: scaled by the signed value of largest magnitude, -127 / m, codes capped at 127,
    d = 1 / that kept float32, and the sums of each 32 codes."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 512), dtype=np.float32)
    x[1, 256:] = 0.0
    q = aq.quantize_activations(x, "q4_k")
    block = x[0, :256]
    peak = block[np.abs(block).argmax()]
    inv = f32(-127) / peak
    codes = np.minimum(np.rint(block * inv), 127).astype(np.int8)
    assert np.array_equal(q.codes[0, :256], codes)
    assert q.d[0, 0] == f32(1) / inv
    assert np.array_equal(q.s[0, :8], codes.reshape(8, 32).sum(axis=1).astype(np.float32))
    assert not q.codes[1, 256:].any() and q.d[1, 1] == 0


@pytest.mark.parametrize("kind", ["q8_0", "q4_0", "q5_0", "q4_1"])
def test_one_block_is_an_integer_sum_and_one_scale(kind):
    """With one block a row the product is float32(dx * dw) times the exact integer sum of codes
    (and Q4_1's sx * mw added): the float64 sum of the same integers, rounded once."""
    blocks = blocks_of(kind, 24, 32)
    x = np.random.default_rng(3).standard_normal((5, 32), dtype=np.float32) * 7
    q = aq.quantize_activations(x, kind)
    qw, dw, extra = aq.weight_blocks(kind, blocks, 32)
    sums = q.codes.astype(np.int64) @ qw.astype(np.int64).T              # (5, 24) exact
    expected = (q.d * dw[:, 0]) * sums.astype(np.float32)               # float32 scale products
    if kind == "q4_1":
        expected = expected + q.s * extra[:, 0]
    assert np.array_equal(aq.q8_product(q, kind, blocks, 32), expected)


@pytest.mark.parametrize("kind", aq.KINDS)
def test_product_equals_float64_of_the_same_quantized_numbers(kind):
    """Many blocks: equal to float64 arithmetic on the same codes and scales within float32's
    rounding of the per-block terms and their sum (the integer sums themselves are exact)."""
    cols = 512 if kind == "q4_k" else 160
    blocks = blocks_of(kind, 30, cols, seed=4)
    x = np.random.default_rng(5).standard_normal((4, cols), dtype=np.float32)
    q = aq.quantize_activations(x, kind)
    size = aq.BLOCK_OF[kind]
    xs = (q.codes.astype(np.float64).reshape(4, -1, size)
          * q.d.astype(np.float64)[:, :, None]).reshape(4, cols)          # x as llama.cpp sees it
    w = quantize_free_weights(kind, blocks, cols)                        # (30, cols) float64
    reference = xs @ w.T
    if kind == "q4_1":                                                   # s stands for d * sum q
        _, _, m = aq.weight_blocks(kind, blocks, cols)
        exact_s = (q.d.astype(np.float64) * q.codes.reshape(4, -1, 32).sum(axis=2))
        reference += (q.s.astype(np.float64) - exact_s) @ m.astype(np.float64).T
    got = aq.q8_product(q, kind, blocks, cols)
    bound = np.abs(xs) @ np.abs(w).T + 1e-30
    assert (np.abs(got - reference) <= 1e-5 * bound).all()


def quantize_free_weights(kind, blocks, cols) -> np.ndarray:
    """W's values in float64 from the same integers and scales (no float32 rounding)."""
    qw, dw, extra = aq.weight_blocks(kind, blocks, cols)
    r = blocks.shape[0]
    if kind == "q4_k":
        sc, m, dmin = extra
        step = np.repeat(dw.astype(np.float64), 8, axis=1) * sc         # (r, nb * 8)
        floor = np.repeat(dmin.astype(np.float64), 8, axis=1) * m
        sub = qw.astype(np.float64).reshape(r, -1, 32)
        return (sub * step[:, :, None] - floor[:, :, None]).reshape(r, cols)
    sub = qw.astype(np.float64).reshape(r, -1, 32) * dw.astype(np.float64)[:, :, None]
    if kind == "q4_1":
        sub += extra.astype(np.float64)[:, :, None]
    return sub.reshape(r, cols)


@pytest.mark.parametrize("kind", aq.KINDS)
def test_close_to_the_float32_product(kind):
    """The 8-bit rounding moves y by about max|x| / 254 a weight: small against |x| |w|."""
    cols = 512 if kind == "q4_k" else 96
    blocks = blocks_of(kind, 20, cols, seed=6)
    x = np.random.default_rng(7).standard_normal((3, cols), dtype=np.float32)
    exact = rows_t_product(x, kind, blocks, cols)
    got = aq.activation_product(x, kind, blocks, cols)
    w = quantize_free_weights(kind, blocks, cols)
    assert np.abs(got - exact).max() <= 0.02 * (np.abs(x) @ np.abs(w).T).max()


def tiny_q4_1_llama() -> Model:
    cfg = llama.LlamaConfig(vocab_size=64, n_layer=2, n_head=2, n_kv_head=1, d_model=64,
                            d_ff=96, tie_embeddings=True)
    params = llama.init_params(cfg, np.random.default_rng(0))
    for name, value in list(params.items()):
        if name == "tok_emb":
            params[name] = quantize_matrix(value, "q8_0")
        elif value.ndim == 2 and value.shape[0] % 32 == 0:
            params[name] = quantize_weight(value, "q4_1")
    return Model(cfg, params)


def test_a_model_with_8_bit_activations(monkeypatch):
    """End to end on the reference path: activations="q8" changes the logits a little (they are
    llama.cpp's way of computing them), keeps the argmax mostly, and every quantized weight,
    the tied head included, runs the 8-bit product."""
    monkeypatch.setenv("GLASSFORMER_KERNELS", "numpy")
    model = tiny_q4_1_llama()
    ids = np.array([[1, 5, 9, 2, 7, 3, 11, 4]])
    exact = model.forward(ids)[0][0]                                     # (T, V)
    q8 = Model(model.cfg, with_activations(model.params, "q8"))
    calls = []
    real = aq.activation_product
    monkeypatch.setattr("glassformer.ops.quant.matrix.activation_product",
                        lambda *a: calls.append(a[1]) or real(*a))
    got = q8.forward(ids)[0][0]
    assert not np.array_equal(got, exact)
    assert np.abs(got - exact).max() <= 0.05 * np.abs(exact).max()
    linear = sum(1 for name, w in model.params.items() if name != "tok_emb"
                 and getattr(w, "kind", None) == "q4_1")                # 7 a layer
    assert calls.count("q8_0") == 1 and calls.count("q4_1") == linear   # the head; every linear
    assert model.params["blocks.0.attn.wq"].activations == "float32"     # the original untouched


def test_bad_activation_settings_are_one_line_errors():
    with pytest.raises(GlassformerError, match="not one of"):
        with_activations({}, "int4")
    from glassformer.io.pretrained import load_pretrained
    with pytest.raises(GlassformerError, match="dequantize"):
        load_pretrained("smollm2", dequantize=True, activations="q8")
