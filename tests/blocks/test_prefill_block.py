"""blocks/prefill_block.py: a long prompt's layers by chunks of positions over threads equal the
blocks (block_forward) on both kernel sets, its keys and values too, with a prefix already
cached; other layers keep the blocks."""
from __future__ import annotations

import numpy as np
import pytest

import glassformer.models.common as common
from glassformer.blas import blas_threads
from glassformer.blocks import prefill_block
from glassformer.kernels import prefill_block_numpy
from glassformer.kernels.choice import _compiled, numba_importable
from glassformer.models import llama
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model

needs_numba = pytest.mark.skipif(not numba_importable(), reason="numba is not installed")
PATHS = ["numpy", pytest.param("numba", marks=needs_numba)]


def make_model(**options) -> Model:
    cfg = llama.LlamaConfig(vocab_size=50, max_seq_len=128, n_layer=2, n_head=6, n_kv_head=2,
                            d_model=48, **options)
    params = llama.init_params(cfg, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    for key in params:  # non-trivial norms, so a misplaced one shows
        if key.endswith(".w"):
            params[key] = params[key] + 0.1 * rng.standard_normal(params[key].shape,
                                                                 dtype=np.float32)
    lay_out_for_decoding(params)
    return Model(cfg, params)


def prefill(model, ids, kernels, monkeypatch, split=None):
    """Logits of the last position and the cache after prefilling ids (B, T), in two forwards
    when split (the second over a cached prefix). kernels None: the blocks."""
    monkeypatch.setattr(common, "prefill_kernels", lambda: kernels)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + 2)
    parts = [ids] if split is None else [ids[:, :split], ids[:, split:]]
    for part in parts:   # positions by row, as generation passes them: (B, T, D) tables
        positions = np.broadcast_to(cache.length + np.arange(part.shape[1]), part.shape)
        logits, _ = model.forward(part, kv_cache=cache, last_only=True, positions=positions)
        cache.advance(part.shape[1])
    return logits[:, -1], cache


def kernels_of(path: str):
    return prefill_block_numpy if path == "numpy" else _compiled("prefill")


@pytest.fixture
def small_chunks(monkeypatch):
    """The block from 16 positions on, in chunks of 8-16, so a short test prompt takes it."""
    monkeypatch.setattr(prefill_block, "PREFILL_FROM", 16)
    monkeypatch.setattr(prefill_block, "CHUNK_ROWS", 8)
    monkeypatch.setattr(prefill_block, "CHUNK_MOST", 16)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("split", [None, 20])
def test_block_equals_the_blocks(monkeypatch, small_chunks, path, threads, split):
    model = make_model()
    ids = np.random.default_rng(2).integers(0, 50, (2, 45))
    calls = []
    original = common.prefill_block_forward
    monkeypatch.setattr(common, "prefill_block_forward",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    expected, ref_cache = prefill(model, ids, None, monkeypatch, split)
    assert not calls
    with blas_threads(threads):
        logits, cache = prefill(model, ids, kernels_of(path), monkeypatch, split)
    assert len(calls) == (1 if split is None else 2)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(cache.k + cache.v, ref_cache.k + ref_cache.v):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=2e-5)


def test_other_layers_keep_the_blocks(monkeypatch, small_chunks):
    """Biases (not covered) or a short prompt: block_forward, the same numbers."""
    def refuse(*args, **kwargs):
        raise AssertionError("the prefill block ran")
    ids = np.random.default_rng(3).integers(0, 50, (1, 40))
    model = make_model(qkv_bias=True)
    expected, _ = prefill(model, ids, None, monkeypatch)
    monkeypatch.setattr(common, "prefill_block_forward", refuse)
    logits, _ = prefill(model, ids, prefill_block_numpy, monkeypatch)
    np.testing.assert_allclose(logits, expected, rtol=1e-6, atol=1e-6)
    prefill(make_model(), ids[:, :10], prefill_block_numpy, monkeypatch)   # below PREFILL_FROM


def test_generation_takes_the_block(monkeypatch, small_chunks):
    """generate's prefill (positions by row) reaches the block and gives the same tokens."""
    from glassformer.generate.generate import generate

    prompt = np.random.default_rng(5).integers(0, 50, (1, 30))
    model = make_model()
    monkeypatch.setattr(common, "prefill_kernels", lambda: None)
    expected = np.stack(list(generate(model, prompt, max_new_tokens=6, temperature=0.0)))
    calls = []
    original = common.prefill_block_forward
    monkeypatch.setattr(common, "prefill_block_forward",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    monkeypatch.setattr(common, "prefill_kernels", lambda: prefill_block_numpy)
    tokens = np.stack(list(generate(model, prompt, max_new_tokens=6, temperature=0.0)))
    assert calls
    np.testing.assert_array_equal(tokens, expected)


@needs_numba
def test_rope_heads_matches_its_twin():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((12, 3, 8), dtype=np.float32)                # (T, H, D)
    cos, sin = (rng.standard_normal((12, 8), dtype=np.float32) for _ in range(2))
    mine = np.zeros((3, 20, 8), np.float32)[:, 5:17]                     # (H, T, D), a view
    theirs = np.zeros((3, 12, 8), np.float32)
    _compiled("prefill").rope_heads(x, cos, sin, mine)
    prefill_block_numpy.rope_heads(x, cos, sin, theirs)
    np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-6)
