"""train/zero_layout.py: a data-parallel run's params and moments in one buffer, group after
group (the 2-rank step against one process: tests/train/test_distributed.py)."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.train.distributed import balanced_groups
from glassformer.train.optim import adamw_init
from glassformer.train.zero_layout import decay_runs, group_parts, group_sizes, laid_groups


def _params():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((4, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32),
            "u": rng.standard_normal((2, 5)).astype(np.float32)}


def test_laid_once_with_the_same_values_then_found_where_they_lie():
    params = _params()
    before = {key: p.copy() for key, p in params.items()}
    opt = adamw_init(params)
    opt.m["w"][...] = 1.0
    groups = balanced_groups(params, 2)
    whole = laid_groups(params, opt, groups)
    assert whole.shape == (3 * sum(group_sizes(params, groups)),)
    for key in params:
        np.testing.assert_array_equal(params[key], before[key])
        assert params[key].base is whole and opt.m[key].base is whole
    assert (opt.m["w"] == 1.0).all() and not opt.v["w"].any()
    assert laid_groups(params, opt, groups) is whole          # the next step: nothing moves
    p, m, v = group_parts(whole, group_sizes(params, groups), 0)
    np.testing.assert_array_equal(p, np.concatenate([params[k].ravel() for k in groups[0]]))
    assert (m == np.concatenate([opt.m[k].ravel() for k in groups[0]])).all()
    p[...] = 7.0                                     # a write through the buffer is the param's
    assert all((params[k] == 7.0).all() for k in groups[0])


def test_an_array_replaced_by_the_caller_is_laid_again():
    params = _params()
    opt = adamw_init(params)
    groups = balanced_groups(params, 2)
    first = laid_groups(params, opt, groups)
    params["b"] = np.full(3, 2.0, np.float32)
    second = laid_groups(params, opt, groups)
    assert second is not first and params["b"].base is second
    assert (params["b"] == 2.0).all()


def test_decay_runs_join_keys_that_decay_alike():
    params = _params()
    assert decay_runs(params, ["w", "u", "b"], frozenset({"w", "u"})) == [
        (0, 22, True), (22, 25, False)]
    assert decay_runs(params, ["w", "b", "u"], frozenset({"w", "u"})) == [
        (0, 12, True), (12, 15, False), (15, 25, True)]
    assert decay_runs(params, [], frozenset()) == []


def test_params_of_two_dtypes_are_one_line():
    params = _params()
    params["b"] = params["b"].astype(np.float64)
    with pytest.raises(GlassformerError, match="one dtype"):
        laid_groups(params, adamw_init(params), balanced_groups(params, 2))
