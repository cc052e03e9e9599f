"""A hybrid cache's checkpoint: restored after the cache ran on, it continues as if those tokens
were never read (states copied, the full layers' keys before it kept); its bytes do not depend on
the context; a checkpoint the cache does not hold is refused in one line."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import qwen3_next
from glassformer.models.model import Model
from glassformer.models.qwen3_next import Qwen3NextConfig


@pytest.fixture(scope="module")
def model():
    cfg = Qwen3NextConfig(vocab_size=31, n_layer=4, full_layers=(1, 3), chunk_size=4)
    return Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))


def feed(model, cache, ids):
    logits, _ = model.forward(ids, kv_cache=cache)
    cache.advance(ids.shape[1])
    return logits


def test_restore_continues_as_if_the_later_tokens_were_never_read(model):
    rng = np.random.default_rng(1)
    prefix, detour, other = (rng.integers(0, 31, (1, n)) for n in (6, 5, 4))
    cache = model.new_cache(1, 32)
    feed(model, cache, prefix)
    saved = cache.checkpoint()
    feed(model, cache, detour)
    feed(model, cache, detour[:, :1])                 # one decoded token too (recurrent form)
    cache.restore(saved)
    assert cache.length == 6
    got = feed(model, cache, other)
    want = model(np.concatenate([prefix, other], axis=1))[:, 6:]
    np.testing.assert_allclose(got, want, atol=1e-5)
    cache.restore(saved)                              # the checkpoint itself was not changed
    np.testing.assert_allclose(feed(model, cache, other), want, atol=1e-5)


def test_checkpoint_bytes_do_not_grow_with_the_context(model):
    short, long = model.new_cache(1, 16), model.new_cache(1, 1024)
    assert short.checkpoint().nbytes() == long.checkpoint().nbytes() > 0
    assert short.checkpoint().nbytes() == sum(s.conv.nbytes + s.recurrent.nbytes
                                              for s in short.states.values())


def test_a_checkpoint_past_the_cache_is_refused(model):
    cache = model.new_cache(1, 16)
    feed(model, cache, np.zeros((1, 3), np.int64))
    later = cache.checkpoint()
    cache.keep(0)                                     # started over: length 0
    with pytest.raises(GlassformerError, match="cannot restore a checkpoint of 3 positions"):
        cache.restore(later)
