"""KVCache (blocks/kv_cache.py): `write` stores a step and hands back everything so far without
moving `length` (only the generate loop advances it); `select_rows` gathers beams."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVCache
from glassformer.errors import GlassformerError


def _cache(max_len: int = 4) -> KVCache:
    return KVCache.allocate(n_layer=2, batch=2, n_kv_head=1, max_len=max_len, head_dim=3)


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
