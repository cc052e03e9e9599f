"""The mixed step (serve/mixed.py, blocks/mixed_step.py): one forward that decodes the running
rows and feeds a joining prompt's chunk gives the numbers of the two forwards apart; in the
engine a joined stream's tokens equal the same request alone and the running rows' tokens are
unchanged; where it cannot apply (MLA, hybrids, batch-invariant) the engine feeds chunks apart.
No timing is asserted: the budget's seconds are given by hand."""
import numpy as np
import pytest
from serve_models import tiny_chat_model, tiny_hybrid_chat_model, tiny_mla_chat_model
from test_engine import PROMPTS, alone, sequence

from glassformer.blocks.mixed_step import product as mixed_product
from glassformer.blocks.prefill_rows import product as by_pieces
from glassformer.kernels.choice import KERNELS_ENV, numba_importable, quant_rows_kernels
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.ops.quant import quantize_matrix, quantize_weight
from glassformer.serve import mixed as mixed_module
from glassformer.serve.budget import FLOOR, GUARD, PROBE, PrefillBudget, chunk_work
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


def quantized_llama() -> Model:
    """A tiny LLaMA with every projection in Q4_1 blocks (the embedding Q8_0), as SmolLM2's file."""
    cfg = llama.LlamaConfig(vocab_size=48, n_layer=2, n_head=2, n_kv_head=1, d_model=64,
                            d_ff=96, tie_embeddings=True)
    params = llama.init_params(cfg, np.random.default_rng(0))
    for name, value in list(params.items()):
        if name == "tok_emb":
            params[name] = quantize_matrix(value, "q8_0")
        elif value.ndim == 2:
            params[name] = quantize_weight(value, "q4_1")                # (in, out) -> W^T
    return Model(cfg, params)


@pytest.mark.skipif(not numba_importable(), reason="numba is not installed (the fast extra)")
def test_a_block_weight_takes_all_the_mixed_rows_in_one_compiled_call(monkeypatch):
    """7 decoded rows and a chunk of 16: one call of the few-rows kernel (each block widened
    once), not 16 rows a call; the numbers those of the matrix's own products."""
    monkeypatch.setenv(KERNELS_ENV, "numba")
    w = quantize_weight(np.random.default_rng(0).standard_normal((64, 96), dtype=np.float32),
                        "q4_1")
    x = np.random.default_rng(1).standard_normal((23, 64), dtype=np.float32)
    kernels = quant_rows_kernels()
    calls = []
    original = kernels.rows_t_product
    monkeypatch.setattr(kernels, "rows_t_product", lambda *a: calls.append(a[0].shape[0])
                        or original(*a))
    np.testing.assert_allclose(mixed_product(x, w), by_pieces(x, w), rtol=1e-5, atol=1e-5)
    assert calls[0] == 23 and calls[1:] == [16, 7]                # mixed: one; by pieces: two


@pytest.mark.parametrize("path", ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))])
def test_the_mixed_step_on_block_weights_gives_the_numbers_apart(monkeypatch, path):
    monkeypatch.setenv(KERNELS_ENV, path)
    model = quantized_llama()
    running, joining_prompts = [[1, 2, 3, 4, 5], [6, 7]], [[8, 9, 10, 11] * 5, [12, 13]]

    def laid_out():
        cache = RowCache.allocate(model, 4, 64)
        first = Prefill.start(cache, model, [0, 1], running, [0, 0])
        first.feed(model)
        first.finish(cache, np.zeros(4, dtype=bool))
        return cache, Prefill.start(cache, model, [2, 3], joining_prompts, [0, 0])
    (apart, joining), (together, mixed) = laid_out(), laid_out()
    assert mixed_applies(model, together, mixed)
    tokens, active = np.array([14, 15]), np.array([True, True])
    for chunk in (7, 13):
        decoded = apart.decode(model, 2, tokens, active)
        joining.feed(model, chunk)
        both = mixed_step(model, together, 2, tokens, active, mixed, chunk)
        np.testing.assert_allclose(both, decoded, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(mixed.logits, joining.logits, rtol=1e-4, atol=1e-4)
    assert mixed.done


def test_a_mixed_step_over_budget_shrinks_the_next_chunks_share():
    """The guard: one mixed step past ratio decode steps (7 streams' gaps at once, the p99)
    shrinks the chunk's share of the budget; steps within it give the share back."""
    keys = 3000.0
    budget = PrefillBudget(keys)
    for _ in range(3):
        budget.decoded(0.1)
    for chunk in (8, 12, 16):                               # 0.001 s a unit: within budget
        budget.fed_beside(1, chunk, 0, 0.1 + 0.001 * chunk_work(1, chunk, 0, keys))
    assert budget.share == 1.0
    wide = budget.fitting(1, 0, beside=True)
    budget.fed_beside(1, 16, 0, 0.1 * budget.ratio + 0.05)  # over budget (a stall, or a cliff)
    assert budget.share == pytest.approx(GUARD)
    assert budget.fitting(1, 0, beside=True) < wide
    for _ in range(40):
        budget.fed_beside(1, 16, 0, 0.1 + 0.001 * chunk_work(1, 16, 0, keys))
    assert budget.share == 1.0
    for _ in range(40):                                     # a machine stalled throughout
        budget.fed_beside(1, 1, 0, 10.0)
    assert budget.share == pytest.approx(FLOOR) and budget.chunk(1, 0, decoding=True) >= 1


def test_the_first_mixed_chunk_is_the_small_probe_whatever_was_fed_apart():
    """The first prompts are fed apart (nothing decodes); their chunks' seconds hold a
    forward's fixed cost a mixed step does not pay, so they neither size nor skip the mixed
    steps' probes: the first mixed chunk is PROBE // 4 and then the ramp."""
    keys = 3000.0
    budget = PrefillBudget(keys)
    budget.fed(7, 40, 0, 1.0)
    budget.fed(7, 40, 0, 1.0)                  # two apart chunks: an apart step would use them
    budget.decoded(0.1)
    assert budget.chunk(1, 0, decoding=True, beside=True) == PROBE // 4
    budget.fed_beside(1, PROBE // 4, 0, 0.1)
    assert budget.chunk(1, 0, decoding=True, beside=True) == 6
    budget.fed_beside(1, 6, 0, 0.1 + 0.01)
    assert budget.cost() == budget.cost(beside=True) != budget.cost(beside=False)
