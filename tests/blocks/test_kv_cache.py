"""KVCache (blocks/kv_cache.py): `write` stores a step and hands back everything so far without
moving `length` (only the generate loop advances it); `select_rows` gathers beams; `allocate`
takes a KVLayout and `bytes_for` says what it takes before it is made."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.errors import GlassformerError


def _cache(max_len: int = 4) -> KVCache:
    return KVCache.allocate(KVLayout(1, 3, 3), n_layer=2, batch=2, max_len=max_len)


def test_write_returns_every_key_and_value_so_far_and_leaves_length():
    cache = _cache()
    rng = np.random.default_rng(0)
    first_k, first_v = rng.standard_normal((2, 2, 1, 2, 3)).astype(np.float32)  # (B, K, T, D)
    k, v = cache.write(1, first_k, first_v)
    assert cache.length == 0
    np.testing.assert_array_equal(k, first_k)
    cache.advance(2)
    new_k, new_v = rng.standard_normal((2, 2, 1, 1, 3)).astype(np.float32)
    k, v = cache.write(1, new_k, new_v)
    assert k.shape == v.shape == (2, 1, 3, 3) and cache.length == 2
    np.testing.assert_array_equal(k, np.concatenate([first_k, new_k], axis=2))
    np.testing.assert_array_equal(v, np.concatenate([first_v, new_v], axis=2))
    assert not cache.k[0].any()  # another layer's arrays are untouched


def test_write_past_the_end_is_refused():
    cache = _cache(max_len=2)
    step = np.zeros((2, 1, 3, 3), np.float32)
    with pytest.raises(GlassformerError, match="KV cache full: 0 positions filled"):
        cache.write(0, step, step)


def test_select_rows_copies_the_rows_asked_for():
    cache = _cache()
    cache.k[0][1] = 1.0
    cache.advance(3)
    picked = cache.select_rows(np.array([1, 1, 0]))
    assert picked.length == 3 and picked.k[0].shape == (3, 1, 4, 3)
    assert picked.k[0][:2].all() and not picked.k[0][2].any()
    picked.k[0][0] = 5.0
    assert cache.k[0].max() == 1.0  # fresh arrays


@pytest.mark.parametrize("layout, dtype", [
    (KVLayout(heads=4, key_dim=8, value_dim=8), np.float32),    # MHA / GQA: one width
    (KVLayout(heads=1, key_dim=6, value_dim=4), np.float32),    # MLA: latent R, RoPE key Dr
    (KVLayout(heads=2, key_dim=5, value_dim=3), np.float64),
    (KVLayout(heads=1, key_dim=6, value_dim=4), np.float16),
], ids=["mha", "mla", "two-widths-f64", "mla-f16"])
def test_bytes_for_is_what_allocate_takes(layout, dtype):
    cache = KVCache.allocate(layout, n_layer=3, batch=2, max_len=7, dtype=dtype)
    allocated = sum(a.nbytes for a in cache.k + cache.v)
    assert KVCache.bytes_for(layout, layers=3, rows=2, context=7, dtype=dtype) == allocated
    assert cache.k[0].shape == (2, layout.heads, 7, layout.key_dim)
    assert cache.v[0].shape == (2, layout.heads, 7, layout.value_dim)
    assert cache.layout == layout
    assert cache.nbytes_per_token() == allocated // (2 * 7)
    assert layout.floats_per_token() * 3 * np.dtype(dtype).itemsize == cache.nbytes_per_token()


def test_a_layout_is_a_record_not_a_tuple():
    layout = KVLayout(heads=2, key_dim=4, value_dim=4)
    assert layout != (2, 4, 4)
    with pytest.raises(TypeError):
        heads, dim = layout   # the old (K, D) unpacking fails loudly, never silently
