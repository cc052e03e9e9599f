"""serve on a hybrid model (Qwen3.5-shaped: Gated DeltaNet layers with a state per row, gated
full attention with keys by column): continuous batching gives each request what `generate`
gives it alone, through staggered joins, leaves and timeline realigns, whole or chunked
prefill, and with seeded sampling; a free row's ids are never reused (its state ran on)."""
import numpy as np
import pytest
from serve_models import tiny_hybrid_chat_model
from test_chunked_prefill import run_chunked
from test_engine import PROMPTS, alone, run_all

from glassformer.blocks.delta_state import HybridCache
from glassformer.serve.prefill import Prefill
from glassformer.serve.rows import RowCache


@pytest.fixture(scope="module")
def model():
    return tiny_hybrid_chat_model(max_seq_len=96)


def test_greedy_batched_equals_generate_alone_through_realigns(model, monkeypatch):
    realigns = []
    original = RowCache.realign
    monkeypatch.setattr(RowCache, "realign",
                        lambda self, end, keep: realigns.append(end) or original(self, end, keep))
    replies = run_all(model, PROMPTS, stagger=True, max_len=72)   # as test_engine's: it fills
    assert len(realigns) >= 2
    for (prompt, n), reply in zip(PROMPTS, replies):
        assert reply.text == alone(model, prompt, n)
        assert reply.finished.usage.prompt_tokens == len(prompt)


@pytest.mark.parametrize("chunk", [3])
def test_chunked_prefill_gives_the_same_replies(model, chunk, monkeypatch):
    replies = run_chunked(model, PROMPTS, chunk, monkeypatch, stagger=True)
    for (prompt, n), reply in zip(PROMPTS, replies):
        assert reply.text == alone(model, prompt, n)


def test_chunks_leave_the_state_of_one_piece(model):
    prompts = [list(b"a longer prompt about cats"), list(b"hi"), list(b"a longer prompt!")]
    cache = RowCache.allocate(model, 3, 96)
    assert isinstance(cache.cache, HybridCache)
    whole = Prefill.start(cache, model, [0, 1, 2], prompts, [0, 0, 0])
    whole.feed(model)
    pieces = Prefill.start(cache, model, [0, 1, 2], prompts, [0, 0, 0])
    while not pieces.done:
        pieces.feed(model, 5)
    np.testing.assert_allclose(pieces.logits, whole.logits, atol=1e-4)
    for i, state in whole.small.states.items():
        np.testing.assert_allclose(pieces.small.states[i].recurrent, state.recurrent, atol=1e-5)


def test_a_free_rows_ids_are_not_reused(model):
    first, then = ("hello there", 10), ("hello there friend", 10)
    replies = run_all(model, [first, then], max_batch=1)
    assert replies[1].finished.usage.cached_tokens == 0
    assert replies[1].text == alone(model, *then)


def test_seeded_sampling_is_generates_with_the_same_seed(model):
    settings = dict(temperature=0.9, top_p=0.8, seed=7)
    replies = run_all(model, PROMPTS[:4], **settings)
    for (prompt, n), reply in zip(PROMPTS[:4], replies):
        assert reply.text == alone(model, prompt, n, temperature=0.9, top_p=0.8, seed=7)
