"""The serving engine (glassformer/serve/): continuous batching gives each request what
`generate` gives it alone, through joins, leaves, timeline realigns and prefix reuse; cancelled
rows leave within a step; stop strings and seeds behave as OpenAI's. Each on a LLaMA (grouped
KV heads) and a DeepSeek-V3 (MLA's latent cache)."""
import threading

import numpy as np
import pytest
from serve_models import tiny_chat_model, tiny_mla_chat_model

from glassformer.generate.sampling import Sampling
from glassformer.generate.stream import generated_ids
from glassformer.serve.engine import Engine, QueueFull
from glassformer.serve.rows import RowCache
from glassformer.serve.sequence import Delta, Sequence, Settings, longest_overlap

STOP = frozenset({129, 130})
WAIT_S = 30.0   # generous: the 2-core test machine is shared


class Reply:
    """Collects one sequence's events."""

    def __init__(self):
        self.text, self.tokens, self.finished, self.done = "", [], None, threading.Event()

    def __call__(self, event):
        if isinstance(event, Delta):
            self.text += event.text
            self.tokens += event.tokens
        else:
            self.finished = event
            self.done.set()


@pytest.fixture(scope="module", params=["llama", "mla"])
def model(request):
    """Each test on a grouped-attention cache and on MLA's latent one (k and v of two widths:
    rows join, leave and realign all the same)."""
    build = tiny_chat_model if request.param == "llama" else tiny_mla_chat_model
    return build(max_seq_len=96)


def sequence(model, prompt: str, *, max_tokens=16, seed=None, stop=(), logprobs=None,
             **sampling):
    reply = Reply()
    settings = Settings(max_tokens, Sampling(**{"temperature": 0.0, **sampling}), seed, stop,
                        logprobs)
    return Sequence(0, model.tokenizer.encode(prompt), settings, STOP, model.tokenizer,
                    reply), reply


def alone(model, prompt: str, n: int, **kwargs) -> str:
    ids = generated_ids(model, model.tokenizer.encode(prompt), stop_ids=STOP, max_new_tokens=n,
                        **{"temperature": 0.0, **kwargs})
    return model.tokenizer.decode(list(ids))


def run_all(model, prompts, *, max_batch=3, max_len=96, stagger=None, **settings):
    engine = Engine(model, max_batch=max_batch, max_queue=64, max_len=max_len)
    engine.start()
    replies = []
    try:
        for k, (prompt, n) in enumerate(prompts):
            seq, reply = sequence(model, prompt, max_tokens=n, **settings)
            engine.submit([seq])
            replies.append(reply)
            if stagger is not None and k % 2:
                replies[k - 1].done.wait(WAIT_S)    # join while others run
        assert all(reply.done.wait(WAIT_S) for reply in replies)
    finally:
        engine.stop()
    return replies


PROMPTS = [("hello there", 20), ("a longer prompt about cats and dogs", 30), ("x", 40),
           ("what is up", 12), ("hello there friend", 25), ("zzz", 45), ("one more", 33)]


def test_greedy_batched_equals_generate_alone_through_realigns(model, monkeypatch):
    # max_len 72 with 7 requests in 3 rows: the timeline fills and realigns several times (a
    # long joiner only lengthens it: rows.py place)
    realigns = []
    original = RowCache.realign
    monkeypatch.setattr(RowCache, "realign",
                        lambda self, end, keep: realigns.append(end) or original(self, end, keep))
    replies = run_all(model, PROMPTS, stagger=True, max_len=72)
    assert len(realigns) >= 2
    for (prompt, n), reply in zip(PROMPTS, replies):
        assert reply.text == alone(model, prompt, n)
        assert reply.finished.reason in ("stop", "length")
        assert reply.finished.usage.prompt_tokens == len(prompt)


def test_a_reply_alone_in_a_later_row_steps_that_row_only(model, monkeypatch):
    """Rows 0..2 filled, then one prompt whose prefix row 2 holds: it runs there alone, and each
    decode step computes row 2 only (rows.py `first_of`), not rows 0..2; the same greedy text."""
    steps = []
    original = RowCache.decode
    monkeypatch.setattr(RowCache, "decode", lambda self, m, rows, tokens, active, first=0:
                        steps.append((first, rows)) or original(self, m, rows, tokens, active,
                                                                first))
    engine = Engine(model, max_batch=3, max_queue=8, max_len=96)
    engine.start()
    try:
        filled = [sequence(model, prompt, max_tokens=4) for prompt in ("x", "zzz", "hello")]
        engine.submit([seq for seq, _ in filled])
        assert all(reply.done.wait(WAIT_S) for _, reply in filled)
        steps.clear()
        seq, reply = sequence(model, "hello there", max_tokens=10)
        engine.submit([seq])
        assert reply.done.wait(WAIT_S)
    finally:
        engine.stop()
    assert reply.finished.usage.cached_tokens == len("hello")
    assert steps and set(steps) == {(2, 3)}
    assert reply.text == alone(model, "hello there", 10)


def test_a_shared_prefix_is_reused_and_changes_nothing(model):
    first, then = ("hello there", 10), ("hello there friend", 10)
    replies = run_all(model, [first, then], max_batch=1)
    assert replies[1].finished.usage.cached_tokens == len("hello there")
    assert replies[1].text == alone(model, *then)


def test_seeded_sampling_is_generates_with_the_same_seed(model):
    settings = dict(temperature=0.9, top_p=0.8, seed=7)
    replies = run_all(model, PROMPTS[:4], **settings)
    for (prompt, n), reply in zip(PROMPTS[:4], replies):
        assert reply.text == alone(model, prompt, n, temperature=0.9, top_p=0.8, seed=7)


def test_logprobs_are_the_models_log_softmax(model):
    (reply,) = run_all(model, [("cats", 4)], logprobs=3)
    ids = model.tokenizer.encode("cats") + model.tokenizer.encode(reply.text)
    logits = model(np.array([ids]))[0].astype(np.float64)            # (T, V)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1,
                                                                          keepdims=True)) \
        - logits.max(-1, keepdims=True)
    for k, token in enumerate(reply.tokens):
        position = len("cats") - 1 + k
        assert token.logprob == pytest.approx(logp[position, ids[position + 1]], abs=1e-4)
        assert len(token.top) == 3 and token.top[0][1] >= token.top[1][1] >= token.top[2][1]


def test_a_cancelled_row_leaves_within_a_step_and_others_go_on(model):
    engine = Engine(model, max_batch=2, max_queue=8, max_len=96)
    engine.start()
    try:
        long_seq, long_reply = sequence(model, "forever", max_tokens=80)
        other_seq, other_reply = sequence(model, "short", max_tokens=10)
        engine.submit([long_seq, other_seq])
        long_seq.cancelled = True
        assert long_reply.done.wait(WAIT_S) and long_reply.finished.reason == "cancelled"
        assert other_reply.done.wait(WAIT_S)
        assert other_reply.text == alone(model, "short", 10)
    finally:
        engine.stop()
    assert engine.running == [None, None]


def test_a_full_queue_refuses_the_whole_request(model):
    engine = Engine(model, max_batch=1, max_queue=2, max_len=96)   # not started: nothing moves
    engine.submit([sequence(model, "a")[0]])
    with pytest.raises(QueueFull, match="max-queue 2"):
        engine.submit([sequence(model, "b")[0], sequence(model, "c")[0]])
    assert len(engine.waiting) == 1


def test_stop_strings_end_the_reply_before_them(model):
    full = alone(model, "hello there", 30)
    stop = full[5:8]
    (reply,) = run_all(model, [("hello there", 30)], stop=(stop,))
    assert reply.text == full[:full.find(stop)] and reply.finished.reason == "stop"
    assert longest_overlap("abcST", "STOP") == 2 and longest_overlap("abc", "STOP") == 0
