"""Prefix-cached scoring equals scoring from scratch; metrics on hand-made items; few-shot draws;
a random model at chance."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.tasks.evaluate.encode import encode_pair
from glassformer.tasks.evaluate.items import Item, read_items
from glassformer.tasks.evaluate.metrics import centred, pick, stderr
from glassformer.tasks.evaluate.prompts import draw_shots, requests
from glassformer.tasks.evaluate.run_task import evaluate_task
from glassformer.tasks.evaluate.batches import plan_batches
from glassformer.tasks.evaluate.score import (item_prefix, score_batch, score_requests,
                                              shared_prefix)
from glassformer.tasks.evaluate.tasks_table import CHOICE, SCHEMA, TASKS

from eval_fixtures import DATA, tiny_model


def from_scratch(model, encoded):
    """Each request's continuation log-probs from one forward over its whole inputs."""
    logits, _ = model.forward(encoded.inputs[None])                  # (1, L, V)
    n = len(encoded.targets)
    scores, _ = log_softmax_forward(logits[0, -n:].astype(np.float64))
    return scores[np.arange(n), encoded.targets]


@pytest.mark.parametrize("task", ["arc_easy", "winograd", "lambada_openai"])
def test_cached_prefix_equals_scoring_each_sequence_from_scratch(model, task):
    spec = TASKS[task]
    items = read_items(DATA / spec.file, spec.kind)[:40]
    for index in range(3):
        encoded = [encode_pair(model.tokenizer, c, x, model.context_len)
                   for c, x in requests(spec, items, index, 2)]
        scored = score_requests(model, encoded)
        for got, request in zip(scored.logps, encoded):
            np.testing.assert_allclose(got, from_scratch(model, request), atol=1e-5)


@pytest.mark.parametrize("task,shots", [("arc_easy", 2), ("winograd", 0), ("lambada_openai", 1)])
def test_items_batched_together_score_as_each_alone(model, task, shots):
    """Prefixes of different lengths in one forward (masked padding, own positions) change
    nothing: each item's log-probs equal score_requests on it alone, and evaluate_task's."""
    spec = TASKS[task]
    items = read_items(DATA / spec.file, spec.kind)     # the whole file, as evaluate_task draws
    groups = [[encode_pair(model.tokenizer, c, x, model.context_len)
               for c, x in requests(spec, items, index, shots)] for index in range(5)]
    assert len({shared_prefix(group) for group in groups}) > 1       # ragged prefixes
    batched = score_batch(model, groups)
    result = evaluate_task(model, spec, DATA, limit=5, shots=shots)
    ran, shared = set(), 0      # prefixes run: an item whose prefix ran already shares its row
    for group, together, record in zip(groups, batched, result.items):
        alone = score_requests(model, group)
        for got, want in zip(together.logps, alone.logps):
            np.testing.assert_allclose(got, want, atol=1e-5)
        prefix = item_prefix(group)
        key = group[0].inputs[:prefix].tobytes()
        shared += key in ran
        assert together.greedy == alone.greedy
        assert together.tokens == alone.tokens - (prefix if key in ran else 0)
        ran.add(key)
        np.testing.assert_allclose(record["logliks"], [sum(x) for x in alone.logps], atol=1e-5)
    assert shared or task != "winograd"     # items 0 and 1: the same sentence, two endings


def test_plan_batches_keeps_every_item_once_within_the_limits(model):
    spec = TASKS["arc_easy"]
    items = read_items(DATA / spec.file, spec.kind)[:30]
    groups = [[encode_pair(model.tokenizer, c, x, model.context_len)
               for c, x in requests(spec, items, index, index % 4)] for index in range(30)]
    batches = plan_batches(groups, rows=9, positions=1500)
    assert sorted(i for batch in batches for i in batch) == list(range(30))
    for batch in batches:
        rows = sum(len(groups[i]) for i in batch)
        longest = max(len(r.inputs) for i in batch for r in groups[i])
        assert len(batch) == 1 or (rows <= 9 and rows * longest <= 1500)


def test_plan_batches_puts_like_prefixes_and_rests_together():
    """Items of two shapes, interleaved, 8 to a batch: each batch holds one shape (no padding;
    sorted by their longest input alone, prefixes of 4 and 30 would share batches)."""
    from glassformer.tasks.evaluate.encode import Encoded

    def item(prefix, rest):
        inputs = np.arange(prefix + rest, dtype=np.int64)
        return [Encoded(np.concatenate([inputs[:prefix], inputs[prefix:] + k]),
                        np.zeros(rest, np.int64), False) for k in range(1, 3)]

    groups = [item(30, 2) if i % 2 else item(4, 20) for i in range(32)]
    for batch in plan_batches(groups, rows=16):
        assert len({i % 2 for i in batch}) == 1


def test_truncation_keeps_the_last_tokens(model):
    encoded = encode_pair(model.tokenizer, "a" * 1000 + " b ", "cd", model.context_len)
    assert encoded.truncated and len(encoded.inputs) == model.context_len
    assert model.tokenizer.decode(encoded.targets.tolist()) == " cd"


def test_acc_norm_divides_by_characters_and_centred_is_zero_at_chance_one_when_perfect():
    assert pick([-4.0, -6.0]) == 0
    assert pick([-4.0, -6.0], [2, 12]) == 1          # -2 per char vs -0.5 per char
    assert centred(1.0, 0.25) == 1.0 and centred(0.25, 0.25) == 0.0
    assert stderr(0.5, 100) == pytest.approx(0.05)


def test_an_oracle_scores_centred_one(monkeypatch, model):
    """A scorer that gives the gold option the best log-likelihood: acc 1, centred 1."""
    import glassformer.tasks.evaluate.run_task as run_task
    from glassformer.tasks.evaluate.score import Scored

    spec = TASKS["copa"]
    items = read_items(DATA / spec.file, spec.kind)
    golds = {}      # the first request's inputs -> its item's gold (items are batched, reordered)
    for index, item in enumerate(items[:30]):
        golds[run_task.encode_item(model, spec, items, index, 0)[0].inputs.tobytes()] = item.gold

    def oracle(model, groups):
        return [Scored([[0.0 if i == golds[group[0].inputs.tobytes()] else -9.0]
                        for i in range(len(group))], [True] * len(group), 1)
                for group in groups]

    monkeypatch.setattr(run_task, "score_batch", oracle)
    result = evaluate_task(model, spec, DATA, limit=30)
    assert result.acc == 1.0 and result.acc_norm == 1.0 and result.centred == 1.0


def test_few_shot_draw_is_seeded_and_never_the_item():
    for index in range(50):
        shots = draw_shots(index, 60, 10)
        assert index not in shots and len(set(shots)) == 10
        assert shots == draw_shots(index, 60, 10)
    assert draw_shots(0, 60, 10) != draw_shots(0, 60, 10, seed=7)
    assert draw_shots(0, 3, 10) == sorted(draw_shots(0, 3, 10), key=draw_shots(0, 3, 10).index)
    assert set(draw_shots(0, 3, 10)) == {1, 2}


def test_prompts_use_the_delimiter_and_separator():
    spec = TASKS["arc_easy"]
    items = [Item(1, "Q1?", ("a", "b"), 1), Item(2, "Q2?", ("c", "d"), 0)]
    assert requests(spec, items, 0, 1) == [("Q2?\nAnswer: c\nQ1?\nAnswer: ", "a"),
                                           ("Q2?\nAnswer: c\nQ1?\nAnswer: ", "b")]
    schema = TASKS["winograd"]
    items = [Item(1, "ends.", ("A", "B"), 1)]
    assert requests(schema, items, 0, 0) == [("A ", "ends."), ("B ", "ends.")]


@pytest.mark.parametrize("task,shots", [("copa", 0), ("arc_easy", 0)])
def test_random_weights_score_within_three_standard_errors_of_chance(task, shots):
    model = tiny_model(seed=5, max_seq_len=512)
    result = evaluate_task(model, TASKS[task], DATA, limit=100 if task == "copa" else 300,
                           shots=shots)
    b = result.baseline
    assert abs(result.acc - b) < 3 * stderr(b, result.n), (result.acc, b)


def test_bad_items_name_the_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"query": "q", "choices": ["a"], "gold": 0}\n{"query": "q", "choices": [],'
                    ' "gold": 0}\n')
    with pytest.raises(GlassformerError, match=r"t.jsonl line 2 has an empty choice list"):
        read_items(path, CHOICE)
    path.write_text('{"context_options": ["a"], "continuation": "x", "gold": 0}\nnot json\n')
    with pytest.raises(GlassformerError, match=r"t.jsonl line 2 is not valid JSON"):
        read_items(path, SCHEMA)
