"""The windowed KV cache (blocks/kv_cache.py): a ring of W slots per windowed layer gives the same
numbers as keeping every position, and its bytes stay flat past the window."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.models import gemma3, llama
from glassformer.models.model import Model

W = 4
LAYOUT = KVLayout(heads=2, key_dim=3, value_dim=3)


def tiny(config_class=llama.LlamaConfig, **overrides):
    cfg = config_class(vocab_size=31, max_seq_len=64, n_layer=3, n_head=4, n_kv_head=2,
                       d_model=16, d_ff=24, sliding_window=W, **overrides)
    family = gemma3.FAMILY if isinstance(cfg, gemma3.Gemma3Config) else llama.FAMILY
    params = family.init_params(cfg, np.random.default_rng(0))
    return Model(cfg, {k: v * 8.0 if v.ndim == 2 else v for k, v in params.items()})


def test_ring_write_hands_back_the_window_in_position_order():
    cache = KVCache.allocate(LAYOUT, n_layer=2, batch=1, max_len=20, windows=(W, None))
    assert cache.k[0].shape[2] == W and cache.k[1].shape[2] == 20 and cache.max_len == 20
    rng = np.random.default_rng(0)
    seen = []
    for t in (6, 1, 1, 3, 1):                       # a prompt longer than W, then steps
        k = rng.standard_normal((1, 2, t, 3)).astype(np.float32)
        keys, _ = cache.write(0, k, k)
        seen.append(k)
        everything = np.concatenate(seen, axis=2)
        held = min(cache.length, W)
        np.testing.assert_array_equal(keys, everything[:, :, cache.length - held:])
        cache.advance(t)


def test_ring_decoding_equals_the_full_forward_past_the_window():
    model = tiny()
    ids = np.random.default_rng(1).integers(0, 31, (2, 3 * W))
    full = model(ids)                                                   # (B, T, V)
    cache = model.new_cache(2, 3 * W, ring=True)
    assert [k.shape[2] for k in cache.k] == [W] * 3
    first, _ = model.forward(ids[:, :5], kv_cache=cache)
    cache.advance(5)
    steps = [first[:, -1]]
    for t in range(5, 3 * W):
        logits, _ = model.forward(ids[:, t:t + 1], kv_cache=cache)
        cache.advance(1)
        steps.append(logits[:, -1])
    np.testing.assert_allclose(np.stack(steps, 1), full[:, 4:], atol=1e-4)


@pytest.mark.parametrize("family", ["mistral", "gemma3"])
def test_greedy_ids_with_rings_equal_recomputing_without_a_cache(family):
    model = tiny() if family == "mistral" else tiny(gemma3.Gemma3Config, full_layers=(2,))
    ids = np.random.default_rng(2).integers(0, 31, (2, 2 * W))
    mask = np.ones(ids.shape, np.int64)
    mask[1, :3] = 0                                                     # left padding
    cached = list(generate(model, ids, attention_mask=mask, max_new_tokens=3 * W,
                           temperature=0.0))
    plain = list(generate(model, ids, attention_mask=mask, max_new_tokens=3 * W,
                          temperature=0.0, use_cache=False))
    np.testing.assert_array_equal(np.stack(cached), np.stack(plain))


def test_cache_bytes_stay_flat_past_the_window():
    model = tiny()                                   # every layer windowed
    at = {n: model.cache_bytes(1, n, ring=True) for n in (W, 4 * W, 16 * W)}
    assert at[W] == at[4 * W] == at[16 * W] == 3 * W * LAYOUT_BYTES(model)
    assert model.cache_bytes(1, 16 * W) == 16 * at[W]                 # a full cache grows
    cache = model.new_cache(1, 16 * W, ring=True)
    assert cache.nbytes() == at[16 * W]
    local_global = tiny(gemma3.Gemma3Config, full_layers=(2,))        # one global layer
    grows = {n: local_global.cache_bytes(1, n, ring=True) for n in (4 * W, 16 * W)}
    assert grows[16 * W] - grows[4 * W] == 12 * W * LAYOUT_BYTES(local_global)


def LAYOUT_BYTES(model) -> int:
    """Bytes of one position of one layer: K (D + D) float32."""
    return model.kv_layout().floats_per_token() * 4


def test_a_ring_is_cut_back_only_while_it_holds_what_the_next_token_reads():
    cache = KVCache.allocate(LAYOUT, n_layer=1, batch=1, max_len=20, windows=(W,))
    k = np.zeros((1, 2, 9, 3), np.float32)
    cache.write(0, k, k)
    cache.advance(9)
    assert cache.can_keep(8) and cache.can_keep(0) and not cache.can_keep(6)
    with pytest.raises(GlassformerError, match="no longer holds"):
        cache.keep(6)
    longer = cache.with_room(40)
    assert longer.max_len == 40 and longer.k[0] is cache.k[0] and longer.length == 9
