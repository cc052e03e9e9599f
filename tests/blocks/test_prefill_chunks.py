"""blocks/prefill_chunks.py: a long cached forward run chunk by chunk gives the unchunked
forward's logits and keys (float32 rounding), leaves the cache's length where it was, and
generate's tokens do not change."""
import numpy as np
import pytest

from glassformer.blocks import prefill_chunks
from glassformer.blocks.prefill_chunks import chunk_bounds, chunks_apply
from glassformer.generate.generate import generate
from glassformer.models import gpt2, llama
from glassformer.models.model import Model

ATOL = 1e-5   # tests/generate's bar for cached against recomputed logits


def _model(family, cfg):
    params = family.init_params(cfg, np.random.default_rng(0))
    for key in params:  # sharper than init so greedy choices are not near-ties
        if params[key].ndim == 2:
            params[key] = (params[key] * 6.0).astype(np.float32)
    return Model(cfg, params)


MODELS = {
    "llama": lambda: _model(llama, llama.LlamaConfig(vocab_size=29, max_seq_len=128, n_layer=2,
                                                      n_head=4, n_kv_head=2, d_model=32)),
    "gpt2": lambda: _model(gpt2, gpt2.GPT2Config(vocab_size=29, max_seq_len=128, n_layer=2,
                                                  n_head=4, d_model=32)),
}


@pytest.fixture(params=sorted(MODELS))
def model(request):
    return MODELS[request.param]()


def _forward(model, monkeypatch, chunk, ids, cache, **kwargs):
    monkeypatch.setattr(prefill_chunks, "CHUNK", chunk)
    return model.forward(ids, kv_cache=cache, **kwargs)[0]


def test_chunk_bounds_cover_the_columns_in_near_equal_chunks():
    assert chunk_bounds(5, 8) == [(0, 5)]
    assert chunk_bounds(129, 128) == [(0, 64), (64, 129)]     # never a one-column chunk
    bounds = chunk_bounds(1000, 128)
    assert len(bounds) == 8 and bounds[0][0] == 0 and bounds[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert {b - a for a, b in bounds} == {125}


@pytest.mark.parametrize("cached", [0, 7])
def test_chunked_logits_and_keys_equal_the_whole_forward(model, monkeypatch, cached):
    ids = np.random.default_rng(1).integers(0, 29, (2, 50))
    results = []
    for chunk in (1000, 8):
        cache = model.new_cache(2, 64)
        if cached:                                        # a prefix already in the cache
            _forward(model, monkeypatch, 1000, ids[:, :cached], cache)
            cache.advance(cached)
        logits = _forward(model, monkeypatch, chunk, ids[:, cached:], cache)
        assert cache.length == cached                     # the caller advances, as unchunked
        results.append((logits, [k[:, :, :50].copy() for k in cache.k]))
    (whole, whole_keys), (chunked, chunked_keys) = results
    assert chunked.shape == whole.shape == (2, 50 - cached, 29)
    np.testing.assert_allclose(chunked, whole, atol=ATOL, rtol=0)
    for a, b in zip(chunked_keys, whole_keys):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=0)


def test_left_padded_rows_and_last_only(monkeypatch):
    model = MODELS["llama"]()
    ids = np.random.default_rng(2).integers(0, 29, (2, 40))
    mask = np.ones((2, 40), dtype=bool)
    mask[1, :11] = False                                  # row 1: 11 padding columns
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    out = [_forward(model, monkeypatch, chunk, ids, model.new_cache(2, 48),
                    attention_mask=mask, positions=positions, last_only=True)
           for chunk in (1000, 6)]
    assert out[1].shape == (2, 1, 29)
    np.testing.assert_allclose(out[1], out[0], atol=ATOL, rtol=0)


def test_generate_gives_the_same_tokens(model, monkeypatch):
    ids = np.random.default_rng(3).integers(0, 29, (2, 45))
    tokens = []
    for chunk in (1000, 8):
        monkeypatch.setattr(prefill_chunks, "CHUNK", chunk)
        tokens.append(np.stack(list(generate(model, ids, max_new_tokens=12, temperature=0.0))))
    np.testing.assert_array_equal(tokens[1], tokens[0])


def test_what_is_not_chunked(model, monkeypatch):
    monkeypatch.setattr(prefill_chunks, "CHUNK", 256)
    x = np.zeros((1, 300, 32), np.float32)
    cache = model.new_cache(1, 400)
    assert chunks_apply(x, kv_cache=cache)
    assert not chunks_apply(x[:, :prefill_chunks.CHUNK], kv_cache=cache)   # short enough
    assert not chunks_apply(x, kv_cache=None)                             # no cache: training
    assert not chunks_apply(x, kv_cache=cache, train=True)
    cache.prefill_rows = True                                             # serve's own tiles
    assert not chunks_apply(x, kv_cache=cache)


def test_a_sliding_window_ring_is_not_chunked(monkeypatch):
    monkeypatch.setattr(prefill_chunks, "CHUNK", 256)
    windowed = _model(llama, llama.LlamaConfig(vocab_size=29, max_seq_len=512, n_layer=2,
                                               n_head=4, d_model=32, sliding_window=16))
    x = np.zeros((1, 300, 32), np.float32)
    assert not chunks_apply(x, kv_cache=windowed.new_cache(1, 400, ring=True))
    assert chunks_apply(x, kv_cache=windowed.new_cache(1, 400))    # every position kept
