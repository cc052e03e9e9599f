"""TurnCheckpoints on their own: the newest MAX_CHECKPOINTS are kept, one per length; a rewind
goes back to the longest one within the shared prefix and drops the ones past it (their ids are
no longer the cache's); a plain KV cache is just cut back; no checkpoint short enough starts
over."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.models import qwen3_next
from glassformer.models.model import Model
from glassformer.models.qwen3_next import Qwen3NextConfig
from glassformer.tasks.chat_checkpoints import (FROM_CACHE, FROM_CHECKPOINT, FROM_NOTHING,
                                                MAX_CHECKPOINTS, TurnCheckpoints, prefill_to)


@pytest.fixture(scope="module")
def model():
    cfg = Qwen3NextConfig(vocab_size=31, n_layer=2, full_layers=(1,), chunk_size=4)
    return Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))


def test_newest_kept_and_rewind_drops_the_stale(model):
    ids = list(np.random.default_rng(1).integers(0, 31, 12))
    cache, saved = model.new_cache(1, 16), TurnCheckpoints()
    for end in range(1, 8):
        prefill_to(model, cache, ids, end)
        saved.save(cache)
        saved.save(cache)                                   # once per length
    assert [c.length for c in saved.saved] == list(range(8 - MAX_CHECKPOINTS, 8))
    assert saved.rewind(cache, 7) == FROM_CACHE and cache.length == 7   # all of it: kept
    assert saved.rewind(cache, 5) == FROM_CHECKPOINT and cache.length == 5
    assert [c.length for c in saved.saved] == [4, 5]
    assert saved.nbytes() == 2 * saved.saved[0].nbytes()
    assert saved.rewind(cache, 3) == FROM_NOTHING and cache.length == 0
    assert saved.saved == []


def test_a_plain_kv_cache_is_cut_back_without_checkpoints():
    cache = KVCache.allocate(KVLayout(heads=1, key_dim=2, value_dim=2), n_layer=1, batch=1,
                             max_len=8)
    cache.advance(6)
    saved = TurnCheckpoints()
    saved.save(cache)
    assert saved.saved == []
    assert saved.rewind(cache, 4) == FROM_CACHE and cache.length == 4
    assert saved.rewind(cache, 0) == FROM_NOTHING and cache.length == 0
