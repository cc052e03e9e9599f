"""Data-parallel training: sharding the batch over worker processes gives the whole batch's loss
and grads, and the same AdamW update."""
import os
import signal

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController

from glassformer.errors import GlassformerError
from glassformer.models import gpt2
from glassformer.train.loop import TrainConfig
from glassformer.train.optim import adamw_init
from glassformer.train.parallel import (balanced_groups, parallel_batch_loss,
                                        parallel_loss_and_grads, parallel_train_step,
                                        parallel_workers, resolve_workers, shard_rows,
                                        shard_seeds, share_run_arrays, usable_cores)
from glassformer.train.step import batch_loss, loss_and_grads

CFG = gpt2.GPT2Config(vocab_size=11, max_seq_len=8, n_layer=2, n_head=2, d_model=16)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    x = rng.integers(0, CFG.vocab_size, (5, 8))
    y = rng.integers(0, CFG.vocab_size, (5, 8))
    return x, y


@pytest.fixture
def params():
    return gpt2.init_params(CFG, np.random.default_rng(1))


def workers_for(params, workers, cfg=CFG, batch_size=5):
    """Shared copies of params and fresh AdamW moments, and the context that starts workers."""
    shared, opt = share_run_arrays(params, adamw_init(params))
    return shared, opt, parallel_workers(gpt2, cfg, shared, opt, workers=workers,
                                         batch_size=batch_size, block_size=8)


def assert_grads_close(ours, theirs, rtol=1e-5):
    """Within rtol of each grad's largest entry; grads that are exactly 0 in exact arithmetic (the
    key bias: softmax ignores a constant per row) are rounding noise, held to the largest grad."""
    assert ours.keys() == theirs.keys()
    largest = max(float(np.abs(g).max()) for g in theirs.values())
    for key in theirs:
        scale = max(float(np.abs(theirs[key]).max()), 1e-3 * largest)
        assert np.abs(ours[key] - theirs[key]).max() <= rtol * scale, key


def test_shard_rows_cover_the_batch_in_order():
    assert shard_rows(12, 2) == [slice(0, 6), slice(6, 12)]
    assert shard_rows(5, 3) == [slice(0, 2), slice(2, 4), slice(4, 5)]  # first ones longer
    assert shard_rows(2, 8) == [slice(0, 1), slice(1, 2)]  # never more shards than rows
    with pytest.raises(GlassformerError, match="at least 1 worker"):
        shard_rows(4, 0)


def test_resolve_workers():
    assert resolve_workers(0, 64) == min(usable_cores(), 64)
    assert resolve_workers(3, 2) == 2
    assert resolve_workers(1, 12) == 1
    with pytest.raises(GlassformerError, match="workers >= 0"):
        resolve_workers(-1, 12)
    with pytest.raises(GlassformerError, match="workers must be >= 0"):
        TrainConfig(workers=-2)


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_sharded_loss_and_grads_equal_the_whole_batch(params, batch, workers):
    x, y = batch
    loss, grads = loss_and_grads(gpt2, params, CFG, x, y, rng=None, dloss=0.5)
    shared, _, start = workers_for(params, workers)
    with start as procs:
        assert procs is not None and len(procs.workers) == workers - 1
        ours_loss, ours = parallel_loss_and_grads(gpt2, shared, CFG, x, y, rng=None, dloss=0.5,
                                                  workers=workers, procs=procs)
    in_turn_loss, in_turn = parallel_loss_and_grads(gpt2, params, CFG, x, y, rng=None,
                                                    dloss=0.5, workers=workers)
    assert ours_loss == pytest.approx(loss, rel=1e-6)
    assert_grads_close(ours, grads)
    assert in_turn_loss == ours_loss  # no workers: the same shards, in turn, the same numbers
    assert all(np.array_equal(in_turn[k], ours[k]) for k in ours)


def test_ignored_targets_weight_the_shards(params, batch):
    """Shards whose targets are mostly ignored weigh less: the mean is over counted targets."""
    x, y = batch
    y = y.copy()
    y[:2, 1:] = -100          # shard 0 (rows 0-2 of 5) keeps few targets
    y[4, :] = -100            # one row counts nothing at all
    loss, grads = loss_and_grads(gpt2, params, CFG, x, y, rng=None)
    shared, _, start = workers_for(params, 2)
    with start as procs:
        ours_loss, ours = parallel_loss_and_grads(gpt2, shared, CFG, x, y, rng=None, workers=2,
                                                  procs=procs)
    assert ours_loss == pytest.approx(loss, rel=1e-6)
    assert_grads_close(ours, grads)


def test_sharded_eval_loss(params, batch):
    x, y = batch
    shared, _, start = workers_for(params, 3)
    with start as procs:
        ours = parallel_batch_loss(gpt2, shared, CFG, x, y, workers=3, procs=procs)
    assert ours == pytest.approx(batch_loss(gpt2, params, CFG, x, y), rel=1e-6)


def test_one_worker_is_the_plain_call(params, batch):
    x, y = batch
    loss, grads = loss_and_grads(gpt2, params, CFG, x, y, rng=None)
    ours_loss, ours = parallel_loss_and_grads(gpt2, params, CFG, x, y, rng=None, workers=1)
    assert ours_loss == loss
    assert all(np.array_equal(ours[k], grads[k]) for k in grads)


def test_dropout_shards_are_reproducible(params, batch):
    x, y = batch
    cfg = gpt2.GPT2Config(vocab_size=11, max_seq_len=8, n_layer=2, n_head=2, d_model=16,
                          dropout=0.2)
    runs = []
    shared, _, start = workers_for(params, 2, cfg)
    with start as procs:
        for use_workers in (procs, procs, None):
            rng = np.random.default_rng(7)
            loss, grads = parallel_loss_and_grads(gpt2, shared, cfg, x, y, rng=rng, workers=2,
                                                  procs=use_workers)
            runs.append((loss, grads, rng.bit_generator.state))
    for loss, grads, state in runs[1:]:
        assert loss == runs[0][0] and state == runs[0][2]
        assert all(np.array_equal(grads[k], runs[0][1][k]) for k in grads)
    seeds = shard_seeds(np.random.default_rng(7), 2)
    assert seeds[0] != seeds[1]  # each shard its own masks


def test_an_error_in_a_worker_is_raised_and_the_worker_lives_on(params, batch):
    x, y = batch
    bad = x.copy()
    bad[-1, 0] = CFG.vocab_size  # out of range, in the last shard only: a worker's
    shared, _, start = workers_for(params, 2)
    with start as procs:
        with pytest.raises(GlassformerError, match="token id"):
            parallel_loss_and_grads(gpt2, shared, CFG, bad, y, rng=None, workers=2, procs=procs)
        loss, _ = parallel_loss_and_grads(gpt2, shared, CFG, x, y, rng=None, workers=2,
                                          procs=procs)
    assert loss == pytest.approx(batch_loss(gpt2, params, CFG, x, y), rel=1e-5)


def test_an_error_here_leaves_no_reply_behind(params, batch):
    x, y = batch
    bad = x.copy()
    bad[0, 0] = -1  # in shard 0, which runs in this process
    shared, _, start = workers_for(params, 2)
    with start as procs:
        with pytest.raises(GlassformerError, match="token id"):
            parallel_loss_and_grads(gpt2, shared, CFG, bad, y, rng=None, workers=2, procs=procs)
        loss = parallel_batch_loss(gpt2, shared, CFG, x, y, workers=2, procs=procs)
    assert loss == pytest.approx(batch_loss(gpt2, params, CFG, x, y), rel=1e-5)


def test_a_dead_worker_is_named(params, batch):
    x, y = batch
    shared, _, start = workers_for(params, 2)
    with start as procs:
        os.kill(procs.workers[0].process.pid, signal.SIGKILL)
        procs.workers[0].process.join()
        with pytest.raises(GlassformerError, match="worker process .* died"):
            parallel_loss_and_grads(gpt2, shared, CFG, x, y, rng=None, workers=2, procs=procs)


def test_workers_exit_with_the_context(params):
    _, _, start = workers_for(params, 3)
    with start as procs:
        processes = [worker.process for worker in procs.workers]
        assert all(p.is_alive() for p in processes)
    assert not any(p.is_alive() for p in processes)


def micro_batches(n, rows=5, seed=4):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, CFG.vocab_size, (rows, 8)), rng.integers(0, CFG.vocab_size, (rows, 8)))
            for _ in range(n)]


@pytest.mark.parametrize("workers, accum, clip, dropout", [
    (2, 1, 1e-3, 0.0),   # clipping on: every step clips
    (2, 3, 0.0, 0.2),    # accumulation, no clipping, dropout
    (3, 2, 1e-3, 0.0),
])
def test_reduce_scatter_step_is_the_step_without_workers(params, workers, accum, clip, dropout):
    """Each process summing, clipping and updating its own group gives the very same params,
    moments and losses as the whole step in this process, shards in turn."""
    cfg = gpt2.GPT2Config(vocab_size=11, max_seq_len=8, n_layer=2, n_head=2, d_model=16,
                          dropout=dropout)
    hyper = dict(grad_clip=clip, lr=1e-2, beta1=0.9, beta2=0.99, weight_decay=0.1)
    theirs, their_state = {k: p.copy() for k, p in params.items()}, adamw_init(params)
    their_rng, our_rng = np.random.default_rng(5), np.random.default_rng(5)
    ours, our_state, start = workers_for(params, workers, cfg)
    with start as procs:
        assert procs is not None
        for step in range(3):
            batches = micro_batches(accum, seed=step)
            their_loss, their_state = parallel_train_step(
                gpt2, theirs, cfg, batches, their_state, rng=their_rng, workers=workers, **hyper)
            our_loss, our_state = parallel_train_step(
                gpt2, ours, cfg, batches, our_state, rng=our_rng, workers=workers, procs=procs,
                **hyper)
            assert our_loss == their_loss
    assert our_state.t == their_state.t == 3
    assert our_rng.bit_generator.state == their_rng.bit_generator.state
    for k in theirs:
        assert np.array_equal(ours[k], theirs[k]), k
        assert np.array_equal(our_state.m[k], their_state.m[k]), k
        assert np.array_equal(our_state.v[k], their_state.v[k]), k


def test_train_step_on_one_shard_is_clip_and_adamw(params, batch):
    """Without workers the step is loss_and_grads, clip_grad_norm and adamw_step, no more."""
    from glassformer.train.optim import adamw_step, clip_grad_norm
    x, y = batch
    hyper = dict(lr=1e-2, beta1=0.9, beta2=0.99, weight_decay=0.1)
    theirs, their_state = {k: p.copy() for k, p in params.items()}, adamw_init(params)
    loss, grads = loss_and_grads(gpt2, theirs, CFG, x, y, rng=None)
    grads, _ = clip_grad_norm(grads, 0.5)
    adamw_step(theirs, grads, their_state, **hyper)
    our_loss, _ = parallel_train_step(gpt2, params, CFG, [(x, y)], adamw_init(params), rng=None,
                                      grad_clip=0.5, **hyper)
    assert our_loss == loss
    assert all(np.array_equal(params[k], theirs[k]) for k in params)


def test_an_error_in_a_worker_during_a_train_step(params, batch):
    """A worker's error is raised here; nothing is updated, and the next step works."""
    x, y = batch
    bad = x.copy()
    bad[-1, 0] = CFG.vocab_size
    hyper = dict(grad_clip=1.0, lr=1e-2, weight_decay=0.1)
    shared, opt, start = workers_for(params, 2)
    before = {k: p.copy() for k, p in shared.items()}
    with start as procs:
        with pytest.raises(GlassformerError, match="token id"):
            parallel_train_step(gpt2, shared, CFG, [(bad, y)], opt, rng=None, workers=2,
                                procs=procs, **hyper)
        assert all(np.array_equal(shared[k], before[k]) for k in shared)
        loss, opt = parallel_train_step(gpt2, shared, CFG, [(x, y)], opt, rng=None, workers=2,
                                        procs=procs, **hyper)
    assert opt.t == 1 and loss == pytest.approx(batch_loss(gpt2, params, CFG, x, y), rel=1e-5)
    with pytest.raises(GlassformerError, match="at least one micro-batch"):
        parallel_train_step(gpt2, shared, CFG, [], opt, rng=None, **hyper)


def test_a_reduce_scatter_needs_a_shard_per_process(params, batch):
    x, y = batch
    shared, opt, start = workers_for(params, 3)
    with start as procs, pytest.raises(GlassformerError, match="over 3 processes needs"):
        parallel_train_step(gpt2, shared, CFG, [(x, y)], opt, rng=None, workers=2, procs=procs,
                            grad_clip=1.0, lr=1e-3)


def test_balanced_groups_split_by_size(params):
    groups = balanced_groups(params, 2)
    assert sorted(k for g in groups for k in g) == sorted(params)
    loads = [sum(params[k].size for k in g) for g in groups]
    assert max(loads) <= 0.6 * sum(loads)
    assert balanced_groups({"a": np.zeros(3)}, 3) == [["a"], [], []]  # one group per worker


def test_without_blas_control_shards_run_in_turn(params, batch, monkeypatch):
    """Where BLAS's threads cannot be limited, no worker starts (its BLAS threads would fight
    ours), and the shards run in turn here with the same numbers."""
    import glassformer.blas as blas
    x, y = batch
    shared, _, start = workers_for(params, 2)
    with start as procs:
        side_by_side = parallel_loss_and_grads(gpt2, shared, CFG, x, y, rng=None, workers=2,
                                               procs=procs)
    no_blas = ThreadpoolController().select(user_api=[])  # selects no library
    monkeypatch.setattr(blas, "find_blas", lambda: no_blas)
    shared, _, start = workers_for(params, 2)
    with start as procs:
        assert procs is None
        in_turn = parallel_loss_and_grads(gpt2, shared, CFG, x, y, rng=None, workers=2,
                                          procs=procs)
    assert in_turn[0] == side_by_side[0]
    assert all(np.array_equal(in_turn[1][k], side_by_side[1][k]) for k in in_turn[1])


def test_more_shards_than_workers_is_an_error(params, batch):
    x, y = batch
    shared, _, start = workers_for(params, 2)
    with start as procs, pytest.raises(GlassformerError, match="3 shards need 2 worker"):
        parallel_loss_and_grads(gpt2, shared, CFG, x, y, rng=None, workers=3, procs=procs)
