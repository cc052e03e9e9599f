"""The mixed step (serve/mixed.py, blocks/mixed_step.py): one forward that decodes the running
rows and feeds a joining prompt's chunk gives the numbers of the two forwards apart; in the
engine a joined stream's tokens equal the same request alone and the running rows' tokens are
unchanged; where it cannot apply (MLA, hybrids, batch-invariant) the engine feeds chunks apart.
No timing is asserted: the budget's seconds are given by hand."""
import numpy as np
import pytest
from serve_models import tiny_chat_model, tiny_hybrid_chat_model, tiny_mla_chat_model
from test_engine import PROMPTS, alone, sequence

from glassformer.serve import mixed as mixed_module
from glassformer.serve.budget import PROBE, PrefillBudget, chunk_work
from glassformer.serve.engine import Engine
from glassformer.serve.mixed import mixed_applies, mixed_step
from glassformer.serve.prefill import Prefill
from glassformer.serve.rows import RowCache

RUNNING = [list(b"hello there"), list(b"abc")]
JOINING = [list(b"a longer prompt about cats"), list(b"dog!")]


@pytest.fixture(scope="module")
def model():
    return tiny_chat_model(max_seq_len=96)


def two_rows_and_joiners(model):
    """Rows 0 and 1 running (their prompts in), rows 2 and 3 joining (laid out, nothing fed)."""
    cache = RowCache.allocate(model, 4, 96)
    first = Prefill.start(cache, model, [0, 1], RUNNING, [0, 0])
    first.feed(model)
    first.finish(cache, np.zeros(4, dtype=bool))
    return cache, Prefill.start(cache, model, [2, 3], JOINING, [0, 0])


def test_the_mixed_step_gives_the_numbers_of_decode_and_chunk_apart(model):
    tokens, active = np.array([5, 7, 0]), np.array([True, True, False])
    apart, joining = two_rows_and_joiners(model)
    together, mixed = two_rows_and_joiners(model)
    assert mixed_applies(model, together, mixed)
    for chunk in (3, 5, 30):                              # the last: what is left (26 - 8)
        decoded = apart.decode(model, 3, tokens, active)
        joining.feed(model, chunk)
        both = mixed_step(model, together, 3, tokens, active, mixed, chunk)   # (3, V)
        np.testing.assert_allclose(both, decoded, atol=1e-5)
        np.testing.assert_allclose(mixed.logits, joining.logits, atol=1e-5)
        assert (mixed.fed, mixed.small.length) == (joining.fed, joining.small.length)
    assert mixed.done and together.cache.length == apart.cache.length
    np.testing.assert_array_equal(together.live, apart.live)
    for layer in range(model.cfg.n_layer):
        np.testing.assert_allclose(together.cache.k[layer], apart.cache.k[layer], atol=1e-5)
        np.testing.assert_allclose(mixed.small.v[layer], joining.small.v[layer], atol=1e-5)


def test_it_applies_to_llama_rows_only(model):
    for other in (tiny_mla_chat_model(max_seq_len=96), tiny_hybrid_chat_model(max_seq_len=96)):
        cache = RowCache.allocate(other, 2, 96)
        assert not mixed_applies(other, cache, Prefill.start(cache, other, [0], [[1, 2]], [0]))
    cache = RowCache.allocate(model, 2, 96, batch_invariant=True)
    assert not mixed_applies(model, cache, Prefill.start(cache, model, [0], [[1, 2]], [0]))


def stepped(engine, model, log, on_join=lambda: None):
    """The first request decodes, then a long one joins (on_join called first); stepped by
    hand (no thread)."""
    first, first_reply = sequence(model, "x", max_tokens=50)
    engine.submit([first])
    for _ in range(3):
        engine.step()
    long_prompt = "a long prompt that joins the running row"
    second, second_reply = sequence(model, long_prompt, max_tokens=5)
    on_join()
    engine.submit([second])
    while not (first_reply.done.is_set() and second_reply.done.is_set()):
        engine.step()
    assert second_reply.text == alone(model, long_prompt, 5)    # the joiner: as alone
    assert first_reply.text == alone(model, "x", 50)            # the running row: unchanged
    assert log, "the mixed step never ran"


def logged(monkeypatch):
    log = []
    original = mixed_module.mixed_step
    monkeypatch.setattr("glassformer.serve.engine.mixed_step", lambda *a: log.append(a[-1])
                        or original(*a))
    return log


def test_a_fixed_chunk_rides_in_the_decode_step(model, monkeypatch):
    log = logged(monkeypatch)
    engine = Engine(model, max_batch=2, max_queue=8, max_len=96, prefill_chunk=4)
    stepped(engine, model, log, on_join=lambda: monkeypatch.setattr(
        Prefill, "feed", lambda *a: pytest.fail("a chunk fed apart")))
    assert log == [4] * (-(-len("a long prompt that joins the running row") // 4))


def test_budgeted_chunks_ride_in_the_decode_step(model, monkeypatch):
    log = logged(monkeypatch)
    engine = Engine(model, max_batch=2, max_queue=8, max_len=96,
                    prefill_budget=PrefillBudget.for_model(model))
    stepped(engine, model, log)
    assert sum(log) >= len("a long prompt that joins the running row")


def test_greedy_replies_are_unchanged_through_staggered_joins(model, monkeypatch):
    log = logged(monkeypatch)
    engine = Engine(model, max_batch=3, max_queue=64, max_len=96, prefill_chunk=3)
    replies = []
    for prompt, n in PROMPTS:                      # each joins while the others decode
        seq, reply = sequence(model, prompt, max_tokens=n)
        engine.submit([seq])
        replies.append(reply)
        for _ in range(5):
            engine.step()
    while not all(reply.done.is_set() for reply in replies):
        engine.step()
    assert log
    for (prompt, n), reply in zip(PROMPTS, replies):
        assert reply.text == alone(model, prompt, n)


def test_the_budget_counts_the_chunk_beyond_the_decode_step():
    keys = 3000.0
    budget = PrefillBudget(keys)
    for _ in range(3):
        budget.decoded(0.1)
    for chunk in (4, 16, 64):                      # a mixed step: decode + 0.001 s per unit
        budget.fed_beside(1, chunk, 0, 0.1 + 0.001 * chunk_work(1, chunk, 0, keys))
    fixed, rate = budget.cost()
    assert fixed == pytest.approx(0.0, abs=1e-6) and rate == pytest.approx(0.001)
    c = budget.chunk(1, 0, decoding=True)           # 0.8 decode steps of chunk work
    assert chunk_work(1, c, 0, keys) <= 80.0 < chunk_work(1, c + 1, 0, keys)


def test_mixed_chunks_grow_by_half_at_most():
    """A mixed step's chunk costs the difference of two noisy seconds, which can read as free:
    the chunk then grows by half per step instead of jumping to the ceiling (the probes too)."""
    budget = PrefillBudget(3000.0)
    budget.decoded(0.1)
    assert budget.chunk(1, 0, decoding=True) == PROBE // 4
    sizes = []
    for _ in range(4):
        sizes.append(budget.chunk(1, 0, decoding=True))
        budget.fed_beside(1, sizes[-1], 0, 0.1)             # nothing beyond the decode step
    assert sizes == [4, 6, 9, 13]


def test_a_noisy_mixed_step_fits_no_fixed_cost():
    """Mixed steps read no weight for the chunk alone: whatever the noise, no fixed cost is
    fitted that would leave the chunk one id a step."""
    keys = 3000.0
    budget = PrefillBudget(keys)
    budget.decoded(0.1)
    for chunk, extra in ((4, 0.05), (6, 0.0), (9, 0.05)):   # noise: a line with intercept > 0
        budget.fed_beside(1, chunk, 0, 0.1 + extra)
    fixed, rate = budget.cost()
    assert fixed == 0.0 and rate == pytest.approx(0.1 / sum(chunk_work(1, c, 0, keys)
                                                             for c in (4, 6, 9)))
    assert budget.chunk(1, 0, decoding=True) > 1


def test_a_mixed_chunk_of_one_id_can_grow_again():
    """1.5 x 1 rounds down to 1: the ramp adds at least one id, or one cheap step would hold
    every later join to one id a step."""
    budget = PrefillBudget(3000.0)
    budget.decoded(0.1)
    budget.fed_beside(1, 1, 0, 0.2)           # one noisy step: the fit allows one id
    budget.fed_beside(1, 1, 0, 0.1)
    budget.decoded(0.1)
    for _ in range(8):
        budget.fed_beside(1, 1, 0, 0.1)       # then free: the window forgets the noisy one
    assert budget.chunk(1, 0, decoding=True) == 2
