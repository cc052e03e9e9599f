"""logit_bias, min-p and the penalties (generate/penalties.py, sampling.py) against
transformers' logits processors where one exists (MinPLogitsWarper, TopKLogitsWarper,
RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor), OpenAI's formula for frequency
and presence, and through `sample` and generate()."""
import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (MinPLogitsWarper,
                                                    RepetitionPenaltyLogitsProcessor,
                                                    SequenceBiasLogitsProcessor,
                                                    TopKLogitsWarper)

from glassformer.errors import GlassformerError
from glassformer.generate.penalties import History, penalize
from glassformer.generate.sampling import (Sampling, check_bias_ids, min_p_filter, sample,
                                           stack, top_k_filter)

V = 50


def logits_of(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, V)) * 3.0


def kept(scores) -> np.ndarray:
    return np.isfinite(np.asarray(scores))


@pytest.mark.parametrize("min_p", [0.05, 0.1, 0.3, 0.9])
def test_min_p_keeps_what_transformers_keeps(min_p):
    logits = logits_of(6, seed=int(min_p * 100)) / 0.7             # after temperature, as HF
    ours = min_p_filter(logits, min_p)
    theirs = MinPLogitsWarper(min_p)(None, torch.tensor(logits)).numpy()
    np.testing.assert_array_equal(kept(ours), kept(theirs))
    np.testing.assert_array_equal(ours[kept(ours)], logits[kept(ours)])


def test_min_p_per_row_and_off():
    logits = logits_of(3)
    out = min_p_filter(logits, np.array([[0.0], [0.2], [1.0]]))
    assert kept(out)[0].all()
    assert kept(out)[2].sum() == 1 and np.argmax(logits[2]) == np.flatnonzero(kept(out)[2])[0]
    np.testing.assert_array_equal(kept(out)[1],
                                  kept(MinPLogitsWarper(0.2)(None, torch.tensor(logits[1:2])))[0])


@pytest.mark.parametrize("k", [1, 3, 17])
def test_top_k_keeps_what_transformers_keeps(k):
    logits = logits_of(4, seed=k)
    theirs = TopKLogitsWarper(k)(None, torch.tensor(logits)).numpy()
    np.testing.assert_array_equal(kept(top_k_filter(logits, k)), kept(theirs))


@pytest.mark.parametrize("penalty", [0.7, 1.3, 2.0])
def test_repetition_penalty_equals_transformers(penalty):
    logits = logits_of(2, seed=3)
    prompt = [[1, 4, 4, 9], [0, 2]]
    output = [[7, 1], [2, 30, 30]]
    ours = penalize(logits, stack([Sampling(repetition_penalty=penalty)] * 2),
                    [History(p, o) for p, o in zip(prompt, output)])
    for row in range(2):
        seen = torch.tensor([prompt[row] + output[row]])
        theirs = RepetitionPenaltyLogitsProcessor(penalty)(seen, torch.tensor(logits[row:row + 1]))
        np.testing.assert_allclose(ours[row], theirs.numpy()[0], rtol=1e-12)


def test_logit_bias_equals_transformers_sequence_bias():
    logits = logits_of(1, seed=5)
    bias = ((3, 5.5), (11, -100.0), (40, 0.25))
    ours = penalize(logits, stack([Sampling(logit_bias=bias)]), None)
    processor = SequenceBiasLogitsProcessor({(t,): b for t, b in bias})
    theirs = processor(torch.tensor([[0]]), torch.tensor(logits)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_frequency_and_presence_are_openais_formula_on_the_reply_only():
    logits = logits_of(1, seed=6)
    history = History([5, 5, 6], [8, 8, 8, 9])                      # the prompt is not counted
    ours = penalize(logits, stack([Sampling(frequency_penalty=0.5, presence_penalty=1.5)]),
                    [history])[0]
    expected = logits[0].copy()
    expected[8] -= 3 * 0.5 + 1.5
    expected[9] -= 1 * 0.5 + 1.5
    np.testing.assert_allclose(ours, expected, rtol=1e-12)


def test_rows_that_do_not_ask_are_untouched_bit_for_bit():
    logits = logits_of(3, seed=7).astype(np.float32)
    records = [Sampling(), Sampling(repetition_penalty=1.5), Sampling(logit_bias=((1, 2.0),))]
    history = [History([1, 2], [3]) for _ in records]
    out = penalize(logits, stack(records), history)
    np.testing.assert_array_equal(out[0], logits[0].astype(np.float64))
    assert penalize(logits, stack([Sampling()] * 3), None) is logits


def test_greedy_rows_feel_bias_and_penalties_and_batching_keeps_each_row():
    logits = logits_of(4, seed=8)
    top = int(np.argmax(logits[0]))
    records = [Sampling(0.0, logit_bias=((top, -100.0),)), Sampling(0.0, repetition_penalty=50.0),
               Sampling(0.9, min_p=0.1, frequency_penalty=2.0), Sampling(1.2, top_k=5)]
    history = [History([top], [top]) for _ in records]
    together = sample(logits, records, [np.random.default_rng(i) for i in range(4)], history)
    assert together[0] != top
    for i, record in enumerate(records):
        alone = sample(logits[i:i + 1], [record], [np.random.default_rng(i)], [history[i]])
        assert together[i] == alone[0]


def test_bad_values_are_one_line():
    for kwargs, words in [(dict(min_p=1.5), "min_p"), (dict(presence_penalty=3), "presence"),
                          (dict(repetition_penalty=0.0), "repetition_penalty"),
                          (dict(logit_bias=((1, 101.0),)), r"\[-100, 100\]"),
                          (dict(logit_bias=((-1, 1.0),)), "ids >= 0")]:
        with pytest.raises(GlassformerError, match=words):
            Sampling(**kwargs)
    with pytest.raises(GlassformerError, match="outside this model's vocabulary"):
        check_bias_ids(Sampling(logit_bias=((V, 1.0),)), V)


def test_generate_with_penalties_equals_transformers_processors_step_by_step():
    from glassformer.generate.generate import generate
    from glassformer.models import gpt2
    from glassformer.models.model import Model
    cfg = gpt2.GPT2Config(vocab_size=V, max_seq_len=64, n_layer=1, n_head=2, d_model=16)
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    model = Model(cfg, {k: (p * 6.0).astype(np.float32) if p.ndim == 2 else p
                        for k, p in params.items()})
    prompt = np.array([[1, 2, 3, 1, 2, 3]])
    record = Sampling(0.0, repetition_penalty=1.8, logit_bias=((4, 3.0),))
    ours = [int(s[0]) for s in generate(model, prompt, max_new_tokens=10, sampling=record)]
    ids = prompt
    processors = [SequenceBiasLogitsProcessor({(4,): 3.0}), RepetitionPenaltyLogitsProcessor(1.8)]
    for _ in range(10):                                  # the reference: a full forward per step
        logits, _ = model.forward(ids)
        scores = torch.tensor(logits[:, -1].astype(np.float64))
        for processor in processors:
            scores = processor(torch.tensor(ids), scores)
        ids = np.concatenate([ids, [[int(scores.argmax())]]], axis=1)
    assert ours == ids[0, prompt.shape[1]:].tolist()
