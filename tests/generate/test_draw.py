"""The draw without the softmax (generate/draw.py) picks the reference's id (softmax, then
draw_ids) for every row and uniform: dense rows, rows filtered to a few tokens, large offsets,
and the draws that land on a boundary, which the reference decides."""
import numpy as np
import pytest

from glassformer.generate import draw as draw_module
from glassformer.generate.draw import draw, draw_reference


@pytest.fixture
def reference_calls(monkeypatch):
    calls = []

    def counted(logits, uniforms):
        calls.append(logits.shape)
        return draw_reference(logits, uniforms)

    monkeypatch.setattr(draw_module, "draw_reference", counted)
    return calls


def test_random_rows_draw_the_reference_ids(reference_calls):
    rng = np.random.default_rng(0)
    for trial in range(300):
        vocab = int(rng.choice([2, 40, 3000]))
        rows = int(rng.integers(1, 9))
        logits = rng.standard_normal((rows, vocab)) * rng.choice([0.5, 3.0, 30.0])
        if trial % 2:                                             # a filter's -inf
            logits[rng.random((rows, vocab)) < 0.9] = -np.inf
            logits[np.arange(rows), rng.integers(0, vocab, rows)] = 1.0
        logits += rng.choice([0.0, 500.0, -500.0])                # exp(x) alone over/underflows
        uniforms = rng.random((rows, 1))
        np.testing.assert_array_equal(draw(logits, uniforms), draw_reference(logits, uniforms))
    assert len(reference_calls) < 5


def test_a_draw_on_a_boundary_goes_to_the_reference(reference_calls):
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]]))
    for u in (0.0, 0.5, 0.75):                                    # cumulative sums hit exactly
        uniforms = np.full((2, 1), u)
        np.testing.assert_array_equal(draw(logits, uniforms), draw_reference(logits, uniforms))
    assert len(reference_calls) == 3
    np.testing.assert_array_equal(draw(logits, np.full((2, 1), 0.6)), [1, 2])


def test_a_row_with_nan_goes_to_the_reference(reference_calls):
    logits = np.zeros((2, 5))
    logits[1, 2] = np.nan
    with np.errstate(invalid="ignore"):
        draw(logits, np.full((2, 1), 0.3))
    assert len(reference_calls) == 1
