"""Checks for integer id arrays (token ids into an embedding table, class targets of a loss).

An id array indexes rows, so a bad entry would either raise a bare NumPy IndexError with no
position or, worse for a negative id, silently read a row from the end of the table. These checks
name the first bad entry, where it sits, and how many rows there are:

    token id 70000 at position (0, 3) is outside the embedding table of V=50257 rows
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError


def first_position(bad: np.ndarray) -> tuple[int, ...]:
    """Index of the first True entry (row-major order) as a tuple of Python ints.

    >>> first_position(np.array([[False, False], [False, True]]))
    (1, 1)
    """
    return tuple(int(i) for i in np.argwhere(bad)[0])


def check_ids(name: str, ids, n: int, *, label: str, table: str,
              ignore_index: int | None = None) -> np.ndarray:
    """Return `ids` if it is an integer array with every entry in [0, n), else raise.

    label:        what one entry is called in the message ("token id", "target").
    table:        what the ids index, for the message ("the embedding table of V=10 rows").
    ignore_index: an id value that is allowed anyway (a loss skips it), or None.
    """
    if not isinstance(ids, np.ndarray):
        raise GlassformerError(
            f"expected {name} to be a NumPy integer array, got {type(ids).__name__}")
    if ids.dtype.kind not in "iu":
        # Name the first entry that is not a whole number (or the first entry when all are).
        if ids.dtype.kind in "fc" and ids.size:
            fractional = ids != np.round(ids)
            bad = fractional if fractional.any() else np.ones(ids.shape, dtype=bool)
            pos = first_position(bad)
            raise GlassformerError(
                f"{label} {ids[pos]} at position {pos} is not an integer id into {table}: "
                f"expected {name} of an integer dtype, got {ids.dtype}")
        raise GlassformerError(f"expected {name} of an integer dtype, got {ids.dtype}")
    outside = (ids < 0) | (ids >= n)
    if ignore_index is not None:
        outside &= ids != ignore_index
    if outside.any():
        pos = first_position(outside)
        raise GlassformerError(f"{label} {int(ids[pos])} at position {pos} is outside {table}")
    return ids
