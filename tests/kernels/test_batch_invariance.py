"""The decode kernels compute each row on its own (serve --batch-invariant): a row's attention
output is bit for bit the same whatever the other rows hold and wherever its keys sit among the
cache's columns, on the compiled kernels and on their NumPy twins alike."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import decode_kernels, numba_importable

PATHS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))]
N_KV, GROUP, D = 2, 3, 16


@pytest.fixture(params=PATHS)
def kernels(request):
    return decode_numpy if request.param == "numpy" else decode_kernels("numba")


def step(kernels, rows: int, row: int, start: int, length: int, seed: int = 0) -> np.ndarray:
    """attend_step with row `row`'s 37 earlier keys at columns [start, start + 37) of a timeline
    of `length` columns (the new key at `length`), every other row random; -> row `row`'s output."""
    mine = np.random.default_rng(0)                        # the row under test: always the same
    own_k, own_v = (mine.standard_normal((N_KV, 37, D), dtype=np.float32) for _ in range(2))
    q = mine.standard_normal(N_KV * GROUP * D, dtype=np.float32)
    k, v = (mine.standard_normal(N_KV * D, dtype=np.float32) for _ in range(2))
    cos, sin = (mine.standard_normal(D, dtype=np.float32) for _ in range(2))
    others = np.random.default_rng(seed + 1)               # the rest: anything
    def floats(*shape):
        return others.standard_normal(shape, dtype=np.float32)
    k_cache, v_cache = floats(rows, N_KV, length + 8, D), floats(rows, N_KV, length + 8, D)
    k_cache[row, :, start:start + 37], v_cache[row, :, start:start + 37] = own_k, own_v
    key_mask = others.random((rows, length + 1)) < 0.7
    key_mask[row] = False
    key_mask[row, start:start + 37] = key_mask[row, length] = True
    qs, ks, vs = floats(rows, N_KV * GROUP * D), floats(rows, N_KV * D), floats(rows, N_KV * D)
    qs[row], ks[row], vs[row] = q, k, v
    coss, sins = floats(rows, D), floats(rows, D)
    coss[row], sins[row] = cos, sin
    out = kernels.attend_step(qs, ks, vs, None, None, None, coss, sins, k_cache, v_cache,
                              length, key_mask)
    return out[row]


def test_a_rows_attention_is_the_same_alone_or_beside_others_anywhere(kernels):
    alone = step(kernels, 1, 0, 0, 37)
    for rows, row, start, length, seed in [(8, 5, 3, 50, 0), (8, 0, 90, 200, 1),
                                           (3, 2, 11, 48, 2), (8, 7, 1, 1000, 3)]:
        np.testing.assert_array_equal(step(kernels, rows, row, start, length, seed), alone)
