"""Top-p on the first places (generate/nucleus.py) keeps exactly the tokens the full stable sort
keeps: on random rows, rows of many ties (the cut inside a run of equal logits), neighbours one
ulp apart, -inf from top-k or a grammar, nuclei larger than the first 64 places, and the rows
the margin sends to the reference."""
import numpy as np
import pytest

from glassformer.generate import nucleus
from glassformer.generate.nucleus import top_p_filter, top_p_sorted
from glassformer.generate.sampling import Sampling, sample


@pytest.fixture
def reference_calls(monkeypatch):
    calls = []

    def counted(logits, p):
        calls.append(logits.shape)
        return top_p_sorted(logits, p)

    monkeypatch.setattr(nucleus, "top_p_sorted", counted)
    return calls


def assert_same(logits, p):
    np.testing.assert_array_equal(top_p_filter(logits, p), top_p_sorted(logits, p))


def test_random_rows_keep_the_reference_tokens(reference_calls):
    rng = np.random.default_rng(0)
    for trial in range(200):
        vocab = int(rng.choice([7, 64, 300, 5000]))
        rows = int(rng.integers(1, 9))
        logits = rng.standard_normal((rows, vocab)) * rng.choice([0.5, 2.0, 6.0, 30.0])
        if trial % 3 == 0:                                        # top-k's or a mask's -inf
            logits[rng.random((rows, vocab)) < 0.6] = -np.inf
            logits[:, 0] = 1.0
        p = rng.choice([0.1, 0.5, 0.9, 0.99, 1.0], size=(rows, 1))
        assert_same(logits, p)
    assert len(reference_calls) < 10                              # the fast way decided


def test_a_cut_inside_a_run_of_ties_keeps_the_lowest_ids(reference_calls):
    for vocab in (10, 1000, 20000):
        logits = np.zeros((3, vocab))
        logits[1, ::2] = 1.5
        logits[2, : vocab // 2] = -np.inf
        for p in (0.30031, 0.50013, 0.77017):       # no place exactly at p
            assert_same(logits, p)
            kept = np.isfinite(top_p_filter(logits, p))
            first = np.flatnonzero(kept[0])
            assert first.tolist() == list(range(first.size))      # the lowest ids
    assert not reference_calls


def test_neighbours_one_ulp_apart_and_a_large_offset():
    rng = np.random.default_rng(1)
    for offset in (0.0, 1e6, -1e15):
        base = rng.standard_normal((4, 3000)) * 3
        logits = base.copy()
        logits[:, 1::2] = np.nextafter(base[:, ::2], np.inf)[:, :1500]
        logits += offset                                          # x - max rounds them equal
        assert_same(logits, np.array([[0.05], [0.5], [0.9], [0.99]]))


def test_a_large_nucleus_grows_past_the_first_places(reference_calls):
    logits = np.random.default_rng(2).standard_normal((2, 20000)) * 0.5   # nuclei of ~thousands
    assert_same(logits, 0.9)
    assert np.isfinite(top_p_filter(logits, 0.9)).sum(axis=-1).min() > nucleus.FIRST_PLACES
    assert not reference_calls


def test_an_exact_boundary_and_bad_logits_go_to_the_reference(reference_calls):
    exact = np.log(np.array([[0.5, 0.25, 0.125, 0.125]]))        # 0.5 + 0.25 = p exactly
    assert np.isfinite(top_p_filter(exact, 0.75)).tolist() == [[True, True, False, False]]
    assert len(reference_calls) == 1
    with np.errstate(invalid="ignore"):
        for bad in (np.nan, np.inf):
            logits = np.zeros((2, 100))
            logits[1, 3] = bad
            assert_same(logits, 0.5)
    assert len(reference_calls) == 3


def test_a_row_answers_alone_what_it_answers_in_a_batch():
    logits = np.random.default_rng(3).standard_normal((8, 5000)) * 4
    p = np.linspace(0.5, 0.95, 8)[:, None]
    together = top_p_filter(logits, p)
    for i in range(8):
        np.testing.assert_array_equal(top_p_filter(logits[i:i + 1], p[i:i + 1]), together[i:i + 1])


def test_sample_draws_the_reference_ids(monkeypatch):
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((8, 5000)) * 4).astype(np.float32)
    records = [Sampling(0.8, top_p=0.9), Sampling(1.2, top_k=50, top_p=0.8), Sampling(0.0),
               Sampling(0.6, top_p=0.95, min_p=0.05)] * 2
    seeds = range(8)
    fast = [sample(logits, records, [np.random.default_rng(s + 10 * i) for i in seeds])
            for s in range(20)]
    monkeypatch.setattr("glassformer.generate.sampling.top_p_filter", top_p_sorted)
    slow = [sample(logits, records, [np.random.default_rng(s + 10 * i) for i in seeds])
            for s in range(20)]
    np.testing.assert_array_equal(fast, slow)
