"""Chunked prefill (serve/prefill.py, `serve --prefill-chunk`): a prompt fed C columns at a time
gives the logits of one piece, greedy replies are unchanged through joins, leaves and realigns,
running rows keep decoding while a long prompt is fed, and a joiner that leaves mid-prefill
frees its row."""
import numpy as np
import pytest
from serve_models import tiny_chat_model, tiny_mla_chat_model
from test_engine import PROMPTS, alone, run_all, sequence

from glassformer.serve import engine as engine_module
from glassformer.serve.engine import Engine
from glassformer.serve.prefill import Prefill
from glassformer.serve.rows import RowCache


@pytest.fixture(scope="module", params=["llama", "mla"])
def model(request):
    build = tiny_chat_model if request.param == "llama" else tiny_mla_chat_model
    return build(max_seq_len=96)


@pytest.mark.parametrize("chunk", [1, 4, 7])
def test_chunks_give_the_logits_of_one_piece(model, chunk):
    prompts = [list(b"a longer prompt about cats"), list(b"hi"), list(b"a longer prompt!")]
    cache = RowCache.allocate(model, 3, 96)
    whole = Prefill.start(cache, model, [0, 1, 2], prompts, [0, 0, 0])
    whole.feed(model)
    pieces = Prefill.start(cache, model, [0, 1, 2], prompts, [0, 0, 0])
    steps = 0
    while not pieces.done:
        pieces.feed(model, chunk)
        steps += 1
    assert steps == -(-len(prompts[0]) // chunk)
    np.testing.assert_allclose(pieces.logits, whole.logits, atol=1e-4)


def run_chunked(model, prompts, chunk, monkeypatch, **kwargs):
    original = Engine.__init__
    monkeypatch.setattr(Engine, "__init__", lambda self, *a, **kw: original(
        self, *a, **{**kw, "prefill_chunk": chunk}))
    return run_all(model, prompts, **kwargs)


@pytest.mark.parametrize("chunk", [3, 16])
def test_greedy_replies_are_unchanged_through_joins_and_realigns(model, chunk, monkeypatch):
    replies = run_chunked(model, PROMPTS, chunk, monkeypatch, stagger=True)
    for (prompt, n), reply in zip(PROMPTS, replies):
        assert reply.text == alone(model, prompt, n)
        assert reply.finished.reason in ("stop", "length")


def test_running_rows_decode_while_a_long_prompt_is_fed(model, monkeypatch):
    log = []
    feed, decode = Prefill.feed, RowCache.decode
    monkeypatch.setattr(Prefill, "feed", lambda self, *a: log.append(
        ("feed", self.tokens.shape[1])) or feed(self, *a))
    monkeypatch.setattr(RowCache, "decode", lambda self, *a: log.append(("decode",))
                        or decode(self, *a))
    engine = Engine(model, max_batch=2, max_queue=8, max_len=96, prefill_chunk=4,
                    mixed=False)        # chunks apart (the mixed step: test_mixed_step.py)
    first, first_reply = sequence(model, "x", max_tokens=60)       # stepped by hand: no thread
    engine.submit([first])
    engine.step()                                           # "x" fed and its first token picked
    long_prompt = "a long prompt that joins the running row"
    second, second_reply = sequence(model, long_prompt, max_tokens=5)
    engine.submit([second])
    while not (first_reply.done.is_set() and second_reply.done.is_set()):
        engine.step()
    feeds = [i for i, entry in enumerate(log) if entry[0] == "feed" and entry[1] > 4]
    assert len(feeds) == -(-len(long_prompt) // 4)
    between = [entry for entry in log[feeds[0]:feeds[-1]] if entry[0] == "decode"]
    assert len(between) == len(feeds) - 1                  # one decode step after each chunk
    assert second_reply.text == alone(model, long_prompt, 5)
    assert first_reply.text == alone(model, "x", 60)


def test_a_joiner_leaving_mid_prefill_frees_its_row(model, monkeypatch):
    engine = Engine(model, max_batch=1, max_queue=8, max_len=96, prefill_chunk=2)
    seq, reply = sequence(model, "a prompt of some length", max_tokens=5)
    engine.submit([seq])
    engine.step()                                          # admitted: the first chunk is fed
    assert engine.joining is not None and not engine.joining.done
    seq.cancelled = True
    engine.step()
    assert reply.finished.reason == "cancelled" and engine.running == [None]
    while engine.joining is not None:                      # the rest is fed, then nobody joins
        engine.step()
    assert engine.running == [None] and reply.tokens == []
    after, after_reply = sequence(model, "a prompt of some", max_tokens=4)
    engine.submit([after])
    while not after_reply.done.is_set():
        engine.step()
    assert after_reply.text == alone(model, "a prompt of some", 4)
    assert after_reply.finished.usage.cached_tokens == len("a prompt of some") - 1
    assert engine_module.Prefill is Prefill
