"""Chance where chance is due, 1 where the answers are perfect: a model with random weights scores
within 3 standard errors of each task's random baseline, and an oracle's centred accuracy (and
CORE) is 1 while a guesser's is 0.

A random model gives every token about the same log-probability, so a choice's summed
log-likelihood is about -len(choice) * log V: `acc` then picks the shortest choice, which is no
guess (on OpenBookQA the right answer is rarely the shortest: it scores 0.11, not 0.25). Per
character (`acc_norm`) the choices tie up to noise, and that pick is the guess the baseline
describes; schema items score one shared continuation, so their `acc` is the guess. Chance is the
file's own, one over each item's choices: DCLM's baselines assume more choices than some of these
files hold (commonsense_qa, agi_eval_lsat_ar and bigbench_language_identification have 4). The sweep
over every task is slow (tests/tasks/evaluate/test_scoring.py keeps a fast one on copa and
arc_easy)."""
import numpy as np
import pytest

from eval_fixtures import DATA
from glassformer.io.jsonl import read_text
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tasks.evaluate.metrics import centred, stderr
from glassformer.tasks.evaluate.results import core_of
from glassformer.tasks.evaluate.run_task import TaskResult, evaluate_task
from glassformer.tasks.evaluate.tasks_table import CHOICE, CORE_TASKS, GENERATION, LM, TASKS

ITEMS = 80
# boolq's baseline (0.62) is DCLM's majority-class share, not a guess: a random model that
# always prefers "no" scores 0.38. Every other task's baseline is one over its choices.
MAJORITY = {"boolq"}
# OpenBookQA's right answer is the longest choice far more often than 1 in 4, and a random model
# reads length: over 80 items and seeds 1-3 it scores acc 0.09-0.13 and acc_norm 0.41-0.46.
LENGTH_ARTIFACT = {"openbook_qa"}
CHOOSING = [s.name for s in TASKS.values() if s.kind not in (LM, GENERATION)
            and s.name not in MAJORITY | LENGTH_ARTIFACT]
WRITING = [s.name for s in TASKS.values() if s.kind == LM]


@pytest.fixture(scope="module")
def random_model():
    """A random LLaMA over every character of every task file (so any task reads)."""
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    from glassformer.tokenizers.char import CharTokenizer
    text = "".join(read_text(DATA / spec.file) for spec in TASKS.values()) + "\n"
    tokenizer = CharTokenizer.from_text(text)
    cfg = llama.LlamaConfig(vocab_size=len(tokenizer.chars), max_seq_len=256, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16, d_ff=24)
    params = llama.init_params(cfg, np.random.default_rng(11))
    return Model(cfg, {k: v.astype(np.float32) for k, v in params.items()}, tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("task", CHOOSING)
def test_random_weights_score_chance_on_every_choice_task(random_model, task):
    result = evaluate_task(random_model, TASKS[task], DATA, limit=ITEMS, shots=0)
    guess = result.acc_norm if TASKS[task].kind == CHOICE else result.acc
    b = np.mean([1 / len(item["logliks"]) for item in result.items])   # the file's own chance
    assert abs(guess - b) < 3 * stderr(b, result.n), (task, guess, b)


@pytest.mark.slow
@pytest.mark.parametrize("task", WRITING)
def test_random_weights_almost_never_write_the_exact_continuation(random_model, task):
    result = evaluate_task(random_model, TASKS[task], DATA, limit=30, shots=0)
    assert result.acc <= 3 * stderr(1 / result.n, result.n), (task, result.acc)


def result_for(spec, acc: float) -> TaskResult:
    return TaskResult(spec.name, spec.kind, 100, acc, None, spec.baseline,
                      centred(acc, spec.baseline), 0.0, 0, 0, [])


def test_an_oracle_centres_to_one_and_a_guesser_to_zero():
    perfect = [result_for(spec, 1.0) for spec in CORE_TASKS]
    guessing = [result_for(spec, spec.baseline) for spec in CORE_TASKS]
    assert all(r.centred == pytest.approx(1.0) for r in perfect)
    assert core_of(perfect) == {"name": "CORE-18", "value": pytest.approx(1.0)}
    assert core_of(guessing)["value"] == pytest.approx(0.0, abs=1e-12)
