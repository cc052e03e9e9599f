"""Gradcheck cases for the embedding lookup: repeated ids, unused rows, 1-d and 0-d ids."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.embedding import embedding_backward, embedding_forward


def _forward(inp):
    return embedding_forward(inp["ids"], inp["table"])


def _backward(dout, ctx):
    return {"table": embedding_backward(dout, ctx)}  # ids are integers: no gradient


def _repeated(rng):
    ids = np.array([[1, 3, 1, 0], [3, 3, 2, 1]])  # (B, T): rows 1 and 3 repeat, row 4 unused
    return {"ids": ids, "table": rng.standard_normal((5, 3))}


def _flat(rng):
    return {"ids": rng.integers(0, 4, size=6), "table": rng.standard_normal((4, 2))}


def _single(rng):
    return {"ids": np.array(2), "table": rng.standard_normal((3, 4))}


def _case(mode, make):
    return GradcheckCase("embedding", mode, make, _forward, _backward)


CASES = [
    _case("repeated-ids", _repeated),
    _case("1d-ids", _flat),
    _case("0d-id", _single),
]
