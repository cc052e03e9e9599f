"""QuantizedMatrix's products against dequantize-then-matmul, and its place in ops/linear.py,
ops/lora.py and ops/embedding.py. Tolerance: the slabbed products sum in the same order per output
as one BLAS product of the dequantized weight, so forward agrees to float32 rounding of a
different BLAS blocking (rtol 1e-5 of the output scale); dx sums slab by slab (rtol 1e-5)."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.ops.embedding import embedding_forward
from glassformer.ops.linear import linear_backward, linear_forward
from glassformer.ops.lora import init_lora, lora_backward, lora_forward
from glassformer.ops.quant import FORMATS, quantize_matrix, quantize_weight
from glassformer.ops.quant import product

RTOL = 1e-5


def close(got, want):
    np.testing.assert_allclose(got, want, atol=RTOL * np.abs(want).max(), rtol=0)


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_products_equal_dequantize_then_matmul(kind, monkeypatch):
    monkeypatch.setattr(product, "SLAB_BYTES", 4 * 512 * 7)   # 7 rows a slab: many slabs, a tail
    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 100)).astype(np.float32)    # (in, out): stored (100, 512)
    q = quantize_weight(w, kind)
    dense = q.dequantize()                                    # (512, 100)
    assert q.shape == (512, 100) and q.T.shape == (100, 512)
    x = rng.standard_normal((2, 3, 512)).astype(np.float32)
    y, ctx = linear_forward(x, q, frozen=True)
    close(y, x @ dense)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx, dw, db = linear_backward(dy, ctx)
    close(dx, dy @ dense.T)
    assert dw is None and db is None
    assert q.nbytes < dense.nbytes / 3                        # the blocks, not float32


def test_lora_on_a_quantized_base_equals_the_dequantized_base():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    q = quantize_weight(w, "q4_1")
    a, b = init_lora(64, 32, 4, rng)
    b = rng.standard_normal(b.shape).astype(np.float32)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    got, ctx_q = lora_forward(x, q, None, a, b, scale=2.0)
    want, ctx_d = lora_forward(x, q.dequantize(), None, a, b, scale=2.0)
    close(got, want)
    dy = rng.standard_normal(got.shape).astype(np.float32)
    for g, r in zip(lora_backward(dy, ctx_q), lora_backward(dy, ctx_d)):
        if r is not None:
            close(g, r)


@pytest.mark.parametrize("kind", ["q8_0", "q4_k"])
def test_embedding_lookup_dequantizes_only_its_rows(kind):
    table = np.random.default_rng(2).standard_normal((10, 256)).astype(np.float32)
    q = quantize_matrix(table, kind)
    ids = np.array([[3, 3, 9], [0, 1, 2]])
    out, _ = embedding_forward(ids, q)
    np.testing.assert_array_equal(out, q.dequantize()[ids])
    close(np.ones((1, 256), np.float32) @ q.T, np.ones((1, 256)) @ q.dequantize().T)  # tied head


def test_bad_shapes_are_one_line():
    q = quantize_weight(np.ones((64, 8), np.float32), "q8_0")
    with pytest.raises(GlassformerError, match="quantized matrix of shape"):
        np.ones((2, 63), np.float32) @ q
    with pytest.raises(GlassformerError, match="not a multiple of the block, 256"):
        quantize_matrix(np.ones((2, 64), np.float32), "q4_k")
