"""Data parallelism across CPU cores: one shard of the batch per core, gradients summed.

A batch of B sequences is cut by rows into W shards (W = workers). Shard 0 runs forward and
backward here, shards 1.. in worker processes (train/workers.py), all at the same time, and the
shard gradients are added up:

    x (B, T) -> x_0 (B_0, T), ..., x_{W-1} (B_{W-1}, T)         B_0 + ... + B_{W-1} = B
    loss = sum_i n_i loss_i / N        grads = sum_i d(n_i loss_i / N)/d params

where n_i counts the targets of shard i the loss averages over (N in all), so the sum is exactly
the gradient of the whole batch's mean loss, only added up in another order: the same numbers to
float32 rounding. This is what torch's DistributedDataParallel does across GPUs, here across the
cores of one CPU. It pays off because NumPy runs elementwise ops on one core: splitting each op
over cores (as torch does) is not available to us, but splitting the batch is. AdamW, which
updates each parameter on its own, is split by groups of parameters the same way.

While workers run, each process's matrix products must stay on its own core (see
glassformer/blas.py): `train` holds BLAS to one thread. Without worker processes (W = 1, or no
"fork" here) the shards run in turn in this process, with the same numbers.

Dropout: with W > 1 each shard draws its masks from its own generator, seeded from `rng`, so a
run is reproducible for a given W, and runs with different W differ in their dropout masks.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from glassformer.blas import blas_threads
from glassformer.errors import GlassformerError
from glassformer.train.optim import ADAMW_EPS, AdamWState, adamw_step
from glassformer.train.step import batch_loss, loss_and_grads
from glassformer.train.workers import (WorkerProcesses, collect_all, order_adamw, order_loss,
                                       order_step, share_arrays, worker_processes)

IGNORE_INDEX = -100  # cross_entropy_forward's default: targets equal to it are not counted


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_workers(workers: int, batch_size: int) -> int:
    """The shard count a run uses: `workers`, or one per usable core when it is 0; at most B."""
    if workers < 0:
        raise GlassformerError(f"expected workers >= 0 (0: one per core), got {workers}")
    return max(1, min(workers or usable_cores(), batch_size))


def shard_rows(batch_size: int, workers: int) -> list[slice]:
    """Split B rows into min(W, B) contiguous, near-equal slices (the first ones one row longer).

    >>> shard_rows(5, 2)
    [slice(0, 3, None), slice(3, 5, None)]
    """
    if workers < 1:
        raise GlassformerError(f"expected at least 1 worker, got {workers}")
    n = min(workers, batch_size)
    sizes = [batch_size // n + (1 if i < batch_size % n else 0) for i in range(n)]
    bounds = np.cumsum([0] + sizes)                                  # n + 1 cut points
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def counted_targets(y: np.ndarray) -> int:
    """How many targets the mean loss averages over (all but IGNORE_INDEX)."""
    return int(np.count_nonzero(y != IGNORE_INDEX))


def shard_seeds(rng: np.random.Generator | None, n: int) -> list[int | None]:
    """A dropout seed per shard drawn from `rng` (None without rng). Drawing advances `rng`, so
    its saved state covers the shards' draws."""
    if rng is None:
        return [None] * n
    return [int(seed) for seed in rng.integers(0, 2**63, size=n)]


def _weights(y: np.ndarray, shards: list[slice]) -> list[float]:
    """n_i / N for each shard (n_i / 1 when nothing is counted, so every weight is 0)."""
    counts = [counted_targets(y[rows]) for rows in shards]
    total = sum(counts)
    return [count / max(total, 1) for count in counts]


def _workers_for(procs: WorkerProcesses, n_shards: int) -> list:
    """The workers for shards 1..n-1; too few would silently drop shards, so that is an error."""
    if len(procs.workers) < n_shards - 1:
        raise GlassformerError(f"{n_shards} shards need {n_shards - 1} worker processes, "
                               f"but {len(procs.workers)} were started")
    return procs.workers[:n_shards - 1]


def _while_busy(busy: list, work):
    """work() while `busy` workers run; if it fails, their replies are read before raising."""
    try:
        return work()
    except BaseException:
        try:
            collect_all(busy)
        except GlassformerError:
            pass  # the error of this process is the one to report
        raise


def parallel_loss_and_grads(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                            rng: np.random.Generator | None, dloss: float = 1.0,
                            workers: int = 1, procs: WorkerProcesses | None = None
                            ) -> tuple[float, dict]:
    """`step.loss_and_grads` over min(W, B) shards of the batch; the same loss and grads.

    x, y (B, T). Shards 1.. go to `procs` (else run here in turn). The returned grads are fresh
    arrays (shard 0's), with the other shards' added in shard order.
    """
    shards = shard_rows(x.shape[0], workers)
    if len(shards) == 1:
        return loss_and_grads(family, params, cfg, x, y, rng=rng, dloss=dloss)
    weights = _weights(y, shards)
    seeds = shard_seeds(rng, len(shards))

    def here(i: int) -> tuple[float, dict]:
        generator = None if seeds[i] is None else np.random.default_rng(seeds[i])
        return loss_and_grads(family, params, cfg, x[shards[i]], y[shards[i]], rng=generator,
                              dloss=dloss * weights[i])

    if procs is None:
        results = [here(i) for i in range(len(shards))]
        losses, all_grads = [r[0] for r in results], [r[1] for r in results]
    else:
        busy = _workers_for(procs, len(shards))
        for i, worker in enumerate(busy, start=1):
            order_step(worker, x[shards[i]], y[shards[i]], dloss * weights[i], seeds[i])
        first_loss, first_grads = _while_busy(busy, lambda: here(0))
        losses = [first_loss] + collect_all(busy)
        all_grads = [first_grads] + [worker.grads for worker in busy]
    grads = all_grads[0]
    for shard_grads in all_grads[1:]:
        for key, g in shard_grads.items():
            grads[key] += g  # fan-in: every shard's gradient of its part of the batch loss
    return float(sum(w * loss for w, loss in zip(weights, losses))), grads


def parallel_batch_loss(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                        workers: int = 1, procs: WorkerProcesses | None = None) -> float:
    """`step.batch_loss` (eval mode, forward only) over min(W, B) shards of the batch."""
    shards = shard_rows(x.shape[0], workers)
    if len(shards) == 1:
        return batch_loss(family, params, cfg, x, y)
    weights = _weights(y, shards)
    if procs is None:
        losses = [batch_loss(family, params, cfg, x[rows], y[rows]) for rows in shards]
    else:
        busy = _workers_for(procs, len(shards))
        for i, worker in enumerate(busy, start=1):
            order_loss(worker, x[shards[i]], y[shards[i]])
        losses = [_while_busy(busy, lambda: batch_loss(family, params, cfg, x[shards[0]],
                                                        y[shards[0]]))]
        losses += collect_all(busy)
    return float(sum(w * loss for w, loss in zip(weights, losses)))


def balanced_groups(params: dict[str, np.ndarray], n: int) -> list[list[str]]:
    """Split the keys into n groups holding about the same number of values (largest first,
    each to the lightest group so far); with fewer keys than n, some groups stay empty.

    >>> balanced_groups({"a": np.zeros(4), "b": np.zeros(3), "c": np.zeros(2)}, 2)
    [['a'], ['b', 'c']]
    """
    groups: list[list[str]] = [[] for _ in range(n)]
    loads = [0] * n
    for key in sorted(params, key=lambda k: -params[k].size):
        lightest = loads.index(min(loads))
        groups[lightest].append(key)
        loads[lightest] += params[key].size
    return groups


def parallel_adamw_step(params: dict, grads: dict, state: AdamWState, *,
                        procs: WorkerProcesses | None = None, lr: float, beta1: float = 0.9,
                        beta2: float = 0.999, eps: float = ADAMW_EPS,
                        weight_decay: float = 0.01) -> tuple[dict, AdamWState]:
    """`optim.adamw_step`, each worker updating its group of params (`Worker.keys`) while this
    process updates the rest; the same update, in place.

    params, state.m and state.v must be the shared arrays the workers were started with.
    """
    hyper = dict(lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(eps),
                 weight_decay=float(weight_decay))
    if procs is None or not procs.workers:
        return adamw_step(params, grads, state, **hyper)
    if grads.keys() != params.keys():
        return adamw_step(params, grads, state, **hyper)  # it names the mismatch
    theirs = {key for worker in procs.workers for key in worker.keys}
    for worker in procs.workers:
        order_adamw(worker, grads, t=state.t, **hyper)
    ours = [key for key in params if key not in theirs]
    part = AdamWState(m={k: state.m[k] for k in ours}, v={k: state.v[k] for k in ours}, t=state.t)
    _while_busy(procs.workers, lambda: adamw_step({k: params[k] for k in ours},
                                                  {k: grads[k] for k in ours}, part, **hyper))
    collect_all(procs.workers)
    return params, AdamWState(m=state.m, v=state.v, t=state.t + 1)


def share_run_arrays(params: dict, opt: AdamWState) -> tuple[dict, AdamWState]:
    """params and AdamW moments copied into shared memory, for `parallel_workers` (the worker
    processes read and update these very arrays)."""
    return share_arrays(params), AdamWState(m=share_arrays(opt.m), v=share_arrays(opt.v), t=opt.t)


@contextmanager
def parallel_workers(family, cfg, params: dict, opt: AdamWState, *, workers: int,
                     batch_size: int, block_size: int) -> Iterator[WorkerProcesses | None]:
    """W - 1 worker processes for shards 1.. (None when W = 1), BLAS held to one thread.

    params and opt must come from `share_run_arrays`. Worker i + 1 updates AdamW group i + 1 of
    `balanced_groups(params, W)`; this process keeps group 0.
    note: with OpenBLAS's own two threads inside every process's products, four threads would
    fight over two cores (a step 2.3x slower). Where BLAS cannot be held to one thread (see
    glassformer/blas.py) no worker starts: the shards run in turn here, with the same numbers.
    """
    if workers <= 1:
        yield None
        return
    with blas_threads(1) as limited:
        if not limited:
            yield None
            return
        groups = balanced_groups(params, workers)
        with worker_processes(family, cfg, params, opt, n_workers=workers - 1,
                              batch_rows=-(-batch_size // workers),  # the largest shard
                              block_size=block_size, groups=groups[1:]) as procs:
            yield procs
