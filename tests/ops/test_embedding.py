"""Embedding op: gradcheck, float32 parity with torch, dtypes kept, and errors for bad ids."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.embedding import CASES
from glassformer.ops.embedding import embedding_backward, embedding_forward

from ops_parity import assert_close as _assert_close, needs_torch, torch

# Finite differences in float64 agree to ~1e-10 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 parity: the lookup is exact and dtable only adds up a handful of float32 values per
# row, in an order that may differ from torch's; 1e-5 of the largest entry leaves a wide margin.
TORCH_RTOL = 1e-5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


@needs_torch
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_torch(seed):
    rng = np.random.default_rng(seed)
    n_rows, width = int(rng.integers(2, 9)), int(rng.integers(1, 17))
    batch, time = int(rng.integers(1, 4)), int(rng.integers(2, 12))
    ids = rng.integers(0, n_rows, size=(batch, time))      # few rows, many ids: repeats
    table = rng.standard_normal((n_rows, width)).astype(np.float32)
    dout = rng.standard_normal((batch, time, width)).astype(np.float32)

    out, ctx = embedding_forward(ids, table)
    dtable = embedding_backward(dout, ctx)

    t_table = torch.tensor(table, requires_grad=True)
    t_out = torch.nn.functional.embedding(torch.tensor(ids), t_table)
    t_out.backward(torch.tensor(dout))
    np.testing.assert_array_equal(out, t_out.detach().numpy())  # a lookup is exact
    _assert_close(dtable, t_table.grad.numpy(), TORCH_RTOL)


def test_repeated_ids_add_up_and_unused_rows_get_zero():
    table = np.zeros((4, 2))
    _, ctx = embedding_forward(np.array([1, 1, 1, 3]), table)
    dtable = embedding_backward(np.ones((4, 2)), ctx)
    assert dtable.tolist() == [[0.0, 0.0], [3.0, 3.0], [0.0, 0.0], [1.0, 1.0]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    table = np.ones((5, 3), dtype=dtype)
    out, ctx = embedding_forward(np.array([[0, 4]], dtype=np.int32), table)
    dtable = embedding_backward(np.ones((1, 2, 3), dtype=dtype), ctx)
    assert out.dtype == dtype and dtable.dtype == dtype
    assert out.shape == (1, 2, 3) and dtable.shape == (5, 3)


def test_out_of_range_id_names_id_position_and_vocab():
    table = np.zeros((50257, 2), dtype=np.float32)
    ids = np.array([[1, 2, 3, 70000], [0, 0, 0, 0]])
    with pytest.raises(GlassformerError) as err:
        embedding_forward(ids, table)
    assert str(err.value) == (
        "token id 70000 at position (0, 3) is outside the embedding table of V=50257 rows")


def test_negative_id_is_rejected_not_wrapped():
    with pytest.raises(GlassformerError, match=r"token id -1 at position \(2,\) .* V=4 rows"):
        embedding_forward(np.array([0, 1, -1]), np.zeros((4, 2)))


def test_non_integer_id_is_named():
    ids = np.array([[0.0, 2.5], [1.0, 1.0]])
    with pytest.raises(GlassformerError, match=r"token id 2.5 at position \(0, 1\) .*V=4"):
        embedding_forward(ids, np.zeros((4, 2)))


def test_table_shape_and_dtype_errors_use_legend_letters():
    with pytest.raises(ShapeError, match=r"expected table of shape \(V, C\), got \(4,\)"):
        embedding_forward(np.array([0]), np.zeros(4))
    with pytest.raises(GlassformerError, match="float32 or float64"):
        embedding_forward(np.array([0]), np.zeros((4, 2), dtype=np.int64))
