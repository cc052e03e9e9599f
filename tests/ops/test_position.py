"""Sinusoidal positions and ALiBi: values vs torch and known slopes, dtypes, bad input.

Both are constant tables (no backward); ALiBi's gradient path is attention's (see
tests/ops/test_attention_bias.py and the attention gradcheck's "alibi" mode)."""
import math

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.ops.position import alibi_bias, alibi_slopes, sinusoidal_positions

# Table entries lie in [-1, 1]; float32 rounding of an exact value is <= 6e-8, so 1e-6 absolute
# (with 1e-5 relative) is a wide margin. Near 0 only the absolute part means anything.
TABLE_RTOL = 1e-5
TABLE_ATOL = 1e-6

# The ALiBi paper's slopes for 8 heads, and the reference rule's for 12: the 8-head slopes, then
# every other slope of the 16-head sequence 2^(-k/2): 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
# BLOOM builds its slopes with float32 powers: ~6e-8 relative rounding.
BLOOM_RTOL = 1e-6

SLOPES_8 = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
SLOPES_12 = SLOPES_8 + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]


def test_sinusoidal_matches_the_formula():
    t, c = 6, 8
    table = sinusoidal_positions(t, c, dtype=np.float64)
    for pos in range(t):
        for i in range(c // 2):
            angle = pos / 10000.0 ** (2 * i / c)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-15)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-15)


def test_sinusoidal_offset_rows_are_rows_of_the_full_table():
    full = sinusoidal_positions(12, 6, dtype=np.float64)
    np.testing.assert_array_equal(sinusoidal_positions(4, 6, offset=8, dtype=np.float64), full[8:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(dtype):
    assert sinusoidal_positions(3, 4, dtype=dtype).dtype == dtype
    assert alibi_bias(4, 3, 5, dtype=dtype).dtype == dtype


def test_alibi_slopes_known_values():
    np.testing.assert_array_equal(alibi_slopes(8), SLOPES_8)
    np.testing.assert_allclose(alibi_slopes(12), SLOPES_12, rtol=1e-15)
    assert alibi_slopes(8).dtype == np.float64


def test_alibi_bias_is_end_aligned_and_linear():
    bias = alibi_bias(8, 2, 4, dtype=np.float64)               # (H, T, S)
    assert bias.shape == (8, 2, 4)
    # head 0 (slope 1/2); queries at absolute positions 2 and 3
    expected = np.array([[-1.0, -0.5, 0.0, 0.5], [-1.5, -1.0, -0.5, 0.0]])
    np.testing.assert_array_equal(bias[0], expected)
    np.testing.assert_array_equal(bias[7], expected / 128.0)   # slope 1/256 = (1/2) / 128
    # the newest query of a cached step sees the same biases as the last row of a full pass
    full = alibi_bias(8, 4, 4, dtype=np.float64)
    np.testing.assert_array_equal(alibi_bias(8, 1, 4, dtype=np.float64)[:, 0], full[:, -1])


def test_bad_input_is_rejected():
    with pytest.raises(GlassformerError, match="even width C, got 5"):
        sinusoidal_positions(3, 5, dtype=np.float32)
    with pytest.raises(GlassformerError, match="expected T to be an integer >= 1, got 0"):
        sinusoidal_positions(0, 4, dtype=np.float32)
    with pytest.raises(GlassformerError, match="expected offset to be an integer >= 0"):
        sinusoidal_positions(3, 4, offset=-2, dtype=np.float32)
    with pytest.raises(GlassformerError, match="expected dtype float32 or float64, got int32"):
        sinusoidal_positions(3, 4, dtype=np.int32)
    with pytest.raises(GlassformerError, match="expected n_head to be an integer >= 1, got 0"):
        alibi_slopes(0)
    with pytest.raises(GlassformerError, match="expected n_head to be an integer >= 1, got 2.0"):
        alibi_slopes(2.0)
    with pytest.raises(GlassformerError, match="at least as many keys as queries, got T=4, S=3"):
        alibi_bias(2, 4, 3, dtype=np.float32)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("offset", [0, 37])
def test_sinusoidal_matches_a_torch_computation(offset):
    t, c = 20, 32
    positions = torch.arange(offset, offset + t, dtype=torch.float64)[:, None]      # (T, 1)
    inv_wavelength = torch.exp(torch.arange(0, c, 2, dtype=torch.float64)
                               * (-math.log(10000.0) / c))                       # (C/2,)
    want = torch.zeros(t, c, dtype=torch.float64)
    want[:, 0::2] = torch.sin(positions * inv_wavelength)
    want[:, 1::2] = torch.cos(positions * inv_wavelength)
    got = sinusoidal_positions(t, c, offset=offset, dtype=np.float32)
    np.testing.assert_allclose(got, want.float().numpy(), rtol=TABLE_RTOL, atol=TABLE_ATOL)


@pytest.mark.parametrize("n_head", [8, 12, 6])
def test_alibi_slopes_match_transformers_bloom(n_head):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom", exc_type=ImportError)
    alibi = bloom.build_alibi_tensor(torch.ones(1, 3, dtype=torch.long), n_head, torch.float64)
    np.testing.assert_allclose(alibi_slopes(n_head), alibi[:, 0, 1].numpy(), rtol=BLOOM_RTOL)
