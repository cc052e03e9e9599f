"""The prefill budget (serve/budget.py): each chunk sized so that feeding it costs at most
(ratio - 1) measured decode steps, with the attention at its position counted. The seconds are
given by hand here: no test times anything."""
import pytest
from serve_models import tiny_chat_model, tiny_mla_chat_model
from test_engine import alone, sequence

from glassformer.cli.serve import prefill_chunk
from glassformer.errors import GlassformerError
from glassformer.serve.budget import CEILING, PROBE, PrefillBudget, chunk_work, keys_per_id
from glassformer.serve.engine import Engine

KEYS = 3000.0


def measured(decode_s: float, unit_s: float, keys: float = KEYS) -> PrefillBudget:
    budget = PrefillBudget(keys)
    for _ in range(3):
        budget.decoded(decode_s)
        budget.fed(1, 10, 0, unit_s * chunk_work(1, 10, 0, keys))   # unit_s a unit of work
    return budget


def test_the_chunk_fits_the_budget_and_the_next_id_would_not():
    budget = measured(decode_s=0.1, unit_s=0.001)
    for position in (0, 1000, 4000):
        c = budget.chunk(1, position, decoding=True)
        allowed = 0.8 * 0.1 / 0.001                                   # units
        assert chunk_work(1, c, position, KEYS) <= allowed < chunk_work(1, c + 1, position, KEYS)


def test_the_chunk_shrinks_as_the_position_grows():
    budget = measured(decode_s=0.1, unit_s=0.001)
    chunks = [budget.chunk(1, position, decoding=True) for position in (0, 2000, 4000, 8000)]
    assert chunks == sorted(chunks, reverse=True) and chunks[0] > chunks[-1]
    assert chunks == [78, 47, 34, 21]     # an id at 4,000 costs 1 + 4000 / 3000 = 2.3x


def test_the_chunk_shrinks_as_the_decode_step_is_cheaper_and_with_more_joiners():
    slow, fast = measured(decode_s=0.2, unit_s=0.001), measured(decode_s=0.05, unit_s=0.001)
    assert fast.chunk(1, 100, True) < slow.chunk(1, 100, True)
    assert slow.chunk(4, 100, True) < slow.chunk(1, 100, True)
    assert measured(decode_s=0.001, unit_s=0.001).chunk(1, 0, True) == 1     # at least one id


def test_a_larger_ratio_allows_more_and_the_median_ignores_one_outlier():
    wide = measured(decode_s=0.1, unit_s=0.001)
    wide.ratio = 2.5
    assert wide.chunk(1, 0, True) > measured(decode_s=0.1, unit_s=0.001).chunk(1, 0, True)
    budget = measured(decode_s=0.1, unit_s=0.001)
    before = budget.chunk(1, 0, True)
    budget.decoded(50.0)                                  # one step stalled by another process
    assert budget.chunk(1, 0, True) == before


def test_a_fixed_cost_per_chunk_is_fitted_and_leaves_less_room():
    """Chunks of 4, 16 and 64 ids costing 0.03 s each plus 0.001 s a unit: the line through
    them finds the 0.03 s, and the chunk fills only the 0.08 - 0.03 s left."""
    plain = measured(decode_s=0.1, unit_s=0.001).chunk(1, 0, True)
    budget = PrefillBudget(KEYS)
    budget.decoded(0.1)
    for c in (4, 16, 64):
        budget.fed(1, c, 0, 0.03 + 0.001 * chunk_work(1, c, 0, KEYS))
    c = budget.chunk(1, 0, True)
    assert budget.fixed == pytest.approx(0.03, abs=1e-3) and c < plain
    assert chunk_work(1, c, 0, KEYS) <= 50.01 and chunk_work(1, c + 1, 0, KEYS) > 49.99
    for _ in range(8):                                    # the fixed cost alone past the budget
        budget.fed(1, 1, 0, 0.09 + 0.001 * chunk_work(1, 1, 0, KEYS))
    assert budget.chunk(1, 0, True) == 1


def test_probes_first_and_the_ceiling_when_nobody_decodes():
    budget = PrefillBudget(KEYS)
    budget.decoded(0.1)
    assert budget.chunk(1, 0, decoding=True) == PROBE // 4     # nothing measured yet
    budget.fed(1, PROBE // 4, 0, 0.01)
    assert budget.chunk(1, 0, decoding=True) == PROBE          # a second size, for the line
    assert budget.chunk(1, 0, decoding=False) == CEILING       # no stream's pace at stake
    assert measured(10.0, 1e-9).chunk(1, 0, True) == CEILING


@pytest.mark.parametrize("build", [tiny_chat_model, tiny_mla_chat_model])
def test_keys_per_id_is_the_weights_over_one_query_key_pair(build):
    model = build(max_seq_len=96)
    layout, cfg = model.kv_layout(), model.cfg
    pair = cfg.n_layer * cfg.n_head * (layout.key_dim + layout.value_dim)
    weights = sum(v.size for k, v in model.params.items() if k not in ("tok_emb", "lm_head"))
    assert keys_per_id(model) == pytest.approx(weights / pair)


def test_an_engine_with_a_budget_gives_the_replies_of_one_piece():
    model = tiny_chat_model(max_seq_len=96)
    engine = Engine(model, max_batch=2, max_queue=8, max_len=96,
                    prefill_budget=PrefillBudget.for_model(model))
    first, first_reply = sequence(model, "x", max_tokens=40)
    engine.submit([first])
    engine.step()
    long_prompt = "a long prompt that joins the running row"
    second, second_reply = sequence(model, long_prompt, max_tokens=5)
    engine.submit([second])
    while not (first_reply.done.is_set() and second_reply.done.is_set()):
        engine.step()
    assert engine.budget.chunks and engine.budget.decode_seconds     # both measured
    assert second_reply.text == alone(model, long_prompt, 5)
    assert first_reply.text == alone(model, "x", 40)


def test_the_flag_reads_auto_or_a_count():
    assert prefill_chunk("auto") is None and prefill_chunk("0") == 0
    assert prefill_chunk("64") == 64
    for bad in ("-1", "lots"):
        with pytest.raises(GlassformerError, match="'auto' or a count"):
            prefill_chunk(bad)
