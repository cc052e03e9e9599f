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
from glassformer.tasks.evaluate.score import score_requests
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
    state = {"index": 0}

    def oracle(model, encoded):
        gold = items[state["index"]].gold
        state["index"] += 1
        return Scored([[0.0 if i == gold else -9.0] for i in range(len(encoded))],
                      [True] * len(encoded), 1)

    monkeypatch.setattr(run_task, "score_requests", oracle)
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
