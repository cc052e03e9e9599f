"""ops/quant's block formats against the gguf package: dequantize bit for bit on random blocks
(random bytes, scales kept finite), quantize bit for bit where gguf implements it (Q8_0, Q4_0,
Q4_1); Q4_K's quantize (llama.cpp's reference search, which gguf lacks) is checked for its round
trip and its error against Q4_0's on the same weights."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from glassformer.errors import GlassformerError
from glassformer.ops.quant import FORMATS, TYPE_IDS, format_of

# byte offsets of each format's float16 fields: their exponent is capped to keep them finite
HALF_FIELDS = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q4_k": (0, 2), "q5_0": (0,)}


def random_blocks(kind: str, n: int, rng) -> np.ndarray:
    fmt = format_of(kind)
    raw = rng.integers(0, 256, (n, fmt.BYTES), dtype=np.uint8)
    for offset in HALF_FIELDS[kind]:
        raw[:, offset + 1] &= 0xBB          # high byte of a float16: exponent < 31, never inf/NaN
    return raw


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_dequantize_equals_gguf_bit_for_bit(kind):
    rng = np.random.default_rng(len(kind))
    blocks = random_blocks(kind, 300, rng)
    gguf_type = GGMLQuantizationType(TYPE_IDS[kind])
    want = gguf_dequantize(blocks.reshape(-1), gguf_type).reshape(300, -1)
    got = format_of(kind).dequantize(blocks)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_dequantize_into_out(kind):
    fmt = format_of(kind)
    blocks = random_blocks(kind, 7, np.random.default_rng(1))
    out = np.full((7, fmt.BLOCK), np.nan, np.float32)
    assert fmt.dequantize(blocks, out=out) is out
    np.testing.assert_array_equal(out, fmt.dequantize(blocks))


@pytest.mark.parametrize("kind", ["q8_0", "q4_0", "q4_1", "q5_0"])
def test_quantize_equals_gguf_bit_for_bit(kind):
    rng = np.random.default_rng(2)
    fmt = format_of(kind)
    x = rng.standard_normal((200, fmt.BLOCK)) * rng.uniform(1e-3, 5, (200, 1))
    x = x.astype(np.float32)
    x[0] = 0                                  # an all-zero block: scale 0
    x[1, :] = 0.5                             # a flat block
    want = gguf_quantize(x.reshape(-1), GGMLQuantizationType(TYPE_IDS[kind]))
    np.testing.assert_array_equal(fmt.quantize(x).reshape(-1), want.reshape(-1))


def test_q4_k_round_trip_beats_q4_0():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    q4_k, q4_0 = format_of("q4_k"), format_of("q4_0")
    back = q4_k.dequantize(q4_k.quantize(x))
    again = q4_k.dequantize(q4_k.quantize(back))
    rms_k = np.sqrt(np.mean((back - x) ** 2))
    rms_0 = np.sqrt(np.mean((q4_0.dequantize(q4_0.quantize(x.reshape(-1, 32))).reshape(x.shape)
                             - x) ** 2))
    assert rms_k < rms_0                      # the searched scales and mins fit better
    assert np.sqrt(np.mean((again - back) ** 2)) < 0.2 * rms_k   # nearly a fixed point
    flat = q4_k.dequantize(q4_k.quantize(np.full((1, 256), -0.25, np.float32)))
    np.testing.assert_allclose(flat, -0.25, atol=1e-3)


def test_unknown_format_names_the_supported_ones():
    with pytest.raises(GlassformerError, match="Q6_K is not supported; supported: Q8_0, Q4_0"):
        format_of("Q6_K")
