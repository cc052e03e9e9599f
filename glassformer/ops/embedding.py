"""Embedding lookup: each integer id picks one row of a (V, C) table.

    out[..., :] = table[ids[...], :]          ids (...) with table (V, C) -> out (..., C)

This is a matrix product with one-hot rows (onehot(ids) @ table) done as indexing, so no (..., V)
one-hot array is ever built. Matches `torch.nn.functional.embedding(ids, table)` (no padding_idx,
no max_norm). Used for token embeddings (`tok_emb`), learned positions (`pos_emb`) and segments.

Backward. Only the table gets a gradient; ids are integers and have none. Row v of the table
collects the upstream gradient of every position that looked it up:

    dtable[v, :] = sum over positions p with ids[p] == v of dout[p, :]

subtle: ids repeat (the same token appears many times in a batch), so `dtable[ids] += dout`
would be wrong: NumPy's buffered fancy-index assignment keeps only the last write per row. Here
the positions are sorted by id, so the gradients of each id sit in one run of rows, and
`np.add.reduceat` sums every run in one pass (`np.add.at` gives the same sums but loops over
the positions one by one, several times slower). Rows never looked up get exactly zero.

Derivation: docs/derivations/embedding.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_shape, check_weight
from glassformer.ops._ids import check_ids


class EmbeddingCtx(NamedTuple):
    """Saved for backward.

    ids:         the integer ids (...), to know which row each upstream gradient goes to.
    table_shape: (V, C), the shape of dtable. The table itself is not kept: the lookup is linear
                 in the table, so its gradient does not depend on the table's values.
    dtype:       the table's dtype, so dtable matches it (float32 stays float32).
    """
    ids: np.ndarray
    table_shape: tuple[int, int]
    dtype: np.dtype


def embedding_forward(ids: np.ndarray, table: np.ndarray
                      ) -> tuple[np.ndarray, EmbeddingCtx]:
    """Row lookup out = table[ids]. ids (...) integers in [0, V), table (V, C) -> out (..., C).

    >>> table = np.arange(6.0).reshape(3, 2)
    >>> out, _ = embedding_forward(np.array([[2, 0]]), table)
    >>> out.tolist()
    [[[4.0, 5.0], [0.0, 1.0]]]
    """
    check_weight("table", table)   # or a QuantizedMatrix: rows dequantized on lookup
    sizes = check_shape("table", table, ("V", "C"), {})
    n_rows = sizes["V"]
    check_ids("ids", ids, n_rows, label="token id",
              table=f"the embedding table of V={n_rows} rows")
    out = table[ids]  # ids (...) indexes rows of (V, C) -> (..., C)
    return out, EmbeddingCtx(ids=ids, table_shape=table.shape, dtype=table.dtype)


def embedding_backward(dout: np.ndarray, ctx: EmbeddingCtx) -> np.ndarray:
    """Returns dtable (V, C): the upstream gradient (..., C) scattered back to the rows looked up."""
    n_rows, width = ctx.table_shape
    dtable = np.zeros((n_rows, width), dtype=ctx.dtype)
    flat_ids = ctx.ids.reshape(-1)            # (...) -> (N,)
    flat_dout = dout.reshape(-1, width)       # (..., C) -> (N, C)
    if flat_ids.size == 0:
        return dtable
    order = np.argsort(flat_ids, kind="stable")                 # (N,): positions grouped by id
    sorted_ids = flat_ids[order]                                # (N,), ascending
    new_id = np.empty(sorted_ids.shape, dtype=bool)             # (N,): row starts a new id
    new_id[0] = True
    np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=new_id[1:])
    run_starts = np.flatnonzero(new_id)                         # (U,): first row of each id
    # A row looked up k times receives the sum of all k gradients: (N, C) -> (U, C).
    dtable[sorted_ids[run_starts]] = np.add.reduceat(flat_dout[order], run_starts, axis=0)
    return dtable
