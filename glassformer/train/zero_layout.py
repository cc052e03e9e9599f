"""A data-parallel run's params and AdamW moments laid in one buffer, group after group.

train/distributed.py splits the optimizer step by parameter groups (ZeRO stage 1): each rank
updates its own group, then every group's params and moments go to every rank. With each array
on its own, that all-gather copied the rank's group into a send buffer (concatenate) and every
received group back out into its arrays, key by key, and AdamW ran one call per key. Laid out
as one buffer,

    buffer = [ group 0: params | m | v ][ group 1: params | m | v ] ... [ group N-1: ... ]
               each part: that group's keys one after another, in the group's order

(params[key], m[key], v[key] are views into it), the all-gather writes the received groups
where the arrays already are (MPI_IN_PLACE: no copy on either side), and a group's params,
moments and its summed grads (the reduce-scatter's output, in the same key order) are each one
flat run, which AdamW updates in one call per stretch of keys with the same weight decay.

`laid_groups` lays the arrays there once (values copied, dict entries replaced by views; the
dicts are the caller's own, which the step updates in place anyway) and on every later step
finds them already laid (each array a view of the same buffer), so nothing is kept anywhere
but in the arrays themselves.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.train.optim import AdamWState


def group_sizes(params: dict[str, np.ndarray], groups: list[list[str]]) -> list[int]:
    """The number of values in each group."""
    return [sum(params[key].size for key in group) for group in groups]


def _buffer_of(params: dict, opt: AdamWState, groups: list[list[str]], total: int):
    """The buffer every array already lies in (a view of it), or None."""
    keys = [key for group in groups for key in group]
    if not keys:
        return None
    whole = params[keys[0]].base
    if not (isinstance(whole, np.ndarray) and whole.ndim == 1 and whole.size == 3 * total):
        return None
    for arrays in (params, opt.m, opt.v):
        for key in keys:
            if arrays[key].base is not whole:
                return None
    return whole


def laid_groups(params: dict[str, np.ndarray], opt: AdamWState,
                groups: list[list[str]]) -> np.ndarray:
    """The one buffer (3 x all values,) that params, opt.m and opt.v lie in, group after group
    (module docstring); on the first call their values are copied there and each dict entry
    becomes a view of it. The arrays must share one dtype (the flat runs AdamW takes)."""
    sizes = group_sizes(params, groups)
    whole = _buffer_of(params, opt, groups, sum(sizes))
    if whole is not None:
        return whole
    dtypes = {params[key].dtype for group in groups for key in group}
    if len(dtypes) > 1:
        raise GlassformerError("data-parallel training needs every parameter in one dtype, got "
                               + ", ".join(sorted(str(d) for d in dtypes)))
    dtype = dtypes.pop() if dtypes else np.dtype(np.float32)
    whole = np.empty(3 * sum(sizes), dtype)
    offset = 0
    for group in groups:
        for arrays in (params, opt.m, opt.v):
            for key in group:
                size = arrays[key].size
                view = whole[offset:offset + size].reshape(arrays[key].shape)
                view[...] = arrays[key]
                arrays[key] = view
                offset += size
    return whole


def group_parts(whole: np.ndarray, sizes: list[int], rank: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(params, m, v) of group `rank` as three flat views of the buffer."""
    start = 3 * sum(sizes[:rank])
    size = sizes[rank]
    return (whole[start:start + size], whole[start + size:start + 2 * size],
            whole[start + 2 * size:start + 3 * size])


def decay_runs(params: dict[str, np.ndarray], group: list[str], decay: frozenset
               ) -> list[tuple[int, int, bool]]:
    """(start, stop, decays) over a group's flat run: consecutive keys with the same weight
    decay joined (balanced_groups puts the large matrices first, so usually two runs).

    >>> decay_runs({"w": np.zeros((2, 2)), "u": np.zeros((3, 1)), "b": np.zeros(2)},
    ...            ["w", "u", "b"], frozenset({"w", "u"}))
    [(0, 7, True), (7, 9, False)]
    """
    runs: list[tuple[int, int, bool]] = []
    offset = 0
    for key in group:
        size, decays = params[key].size, key in decay
        if runs and runs[-1][2] == decays:
            runs[-1] = (runs[-1][0], offset + size, decays)
        else:
            runs.append((offset, offset + size, decays))
        offset += size
    return runs
