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
over cores (as torch does) is not available to us, but splitting the batch is.

The optimizer step (`parallel_train_step`) splits the rest by parameters: each process owns a
group of them (`balanced_groups`), sums only its group's grads over the shards, and clips and
updates only those, the way a reduce-scatter splits the work across GPUs. The global norm that
clipping needs comes from each group's squared norms, a few floats on the pipes.

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
from glassformer.train.optim import (ADAMW_EPS, AdamWState, adamw_step, clip_coefficient,
                                     clip_grad_norm, global_norm)
from glassformer.train.step import batch_loss, loss_and_grads
from glassformer.train.workers import (WorkerProcesses, collect_all, order_adamw, order_loss,
                                       order_reduce, order_step, reduce_group, share_arrays,
                                       update_group, worker_processes)

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


def _shard_loss_and_grads(family, params: dict, cfg, x: np.ndarray, y: np.ndarray,
                          seed: int | None, dloss: float) -> tuple[float, dict]:
    """One shard's loss and grads here, its dropout drawn from a generator seeded by `seed`."""
    generator = None if seed is None else np.random.default_rng(seed)
    return loss_and_grads(family, params, cfg, x, y, rng=generator, dloss=dloss)


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
        return _shard_loss_and_grads(family, params, cfg, x[shards[i]], y[shards[i]], seeds[i],
                                     dloss * weights[i])

    if procs is None:
        results = [here(i) for i in range(len(shards))]
        losses, all_grads = [r[0] for r in results], [r[1] for r in results]
    else:
        busy = _workers_for(procs, len(shards))
        for i, worker in enumerate(busy, start=1):
            order_step(worker, x[shards[i]], y[shards[i]], dloss * weights[i], seeds[i])
        first_loss, first_grads = _while_busy(busy, lambda: here(0))
        losses = [first_loss] + [reply[0] for reply in collect_all(busy)]
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
        losses += [reply[0] for reply in collect_all(busy)]
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


def parallel_train_step(family, params: dict, cfg, micro_batches: list, opt: AdamWState, *,
                        rng: np.random.Generator | None, workers: int = 1,
                        procs: WorkerProcesses | None = None, grad_clip: float, lr: float,
                        beta1: float = 0.9, beta2: float = 0.999, eps: float = ADAMW_EPS,
                        weight_decay: float = 0.01) -> tuple[float, AdamWState]:
    """One optimizer step, params and moments updated in place: the grads of each (x, y) in
    `micro_batches` summed (gradient accumulation, each weighted 1/n), clipped to global norm
    `grad_clip` (0: no clipping), then AdamW. Returns (mean micro-batch loss, state with t + 1).

    Without workers: `parallel_loss_and_grads` per micro-batch, shards in turn, then
    `clip_grad_norm` and `adamw_step`. With them, the same numbers by a reduce-scatter, so that
    no process sums, clips or updates every parameter (see `_reduce_scatter_step`).
    """
    hyper = dict(lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(eps),
                 weight_decay=float(weight_decay))
    if not micro_batches:
        raise GlassformerError("expected at least one micro-batch")
    if procs is not None and procs.workers:
        return _reduce_scatter_step(family, params, cfg, micro_batches, opt, rng=rng,
                                    workers=workers, procs=procs, grad_clip=float(grad_clip),
                                    hyper=hyper)
    total, summed = 0.0, None
    for x, y in micro_batches:
        loss, grads = parallel_loss_and_grads(family, params, cfg, x, y, rng=rng,
                                              dloss=1.0 / len(micro_batches), workers=workers)
        total += loss
        if summed is None:
            summed = grads
        else:
            for key, g in grads.items():
                summed[key] += g   # this function owns `summed`: add micro-batch grads
    if grad_clip > 0.0:
        summed, _ = clip_grad_norm(summed, grad_clip)
    params, opt = adamw_step(params, summed, opt, **hyper)
    return total / len(micro_batches), opt


def _reduce_scatter_step(family, params: dict, cfg, micro_batches: list, opt: AdamWState, *,
                         rng, workers: int, procs: WorkerProcesses, grad_clip: float,
                         hyper: dict) -> tuple[float, AdamWState]:
    """`parallel_train_step` with each process owning a group of params (`procs.keys` here,
    `Worker.keys` in each worker), like a reduce-scatter across GPUs:

        every process    grads of its shard; publishes those of the other groups   (b"S", keep)
        owner of group   its keys summed over shards, in shard order               (b"R")
        here             global norm from each group's ||g||^2, added in the order
                         clip_grad_norm adds them; the clip coefficient
        owner of group   grads times the coefficient (when < 1), AdamW             (b"A")

    So each process copies (W - 1)/W of its grads out, and sums, clips and updates only its 1/W
    of the params; the float32 sums and the norm are the ones the path without workers computes.
    """
    shards = shard_rows(micro_batches[0][0].shape[0], workers)
    busy = _workers_for(procs, len(shards))
    if len(busy) != len(procs.workers):
        raise GlassformerError(f"a reduce-scatter over {len(procs.workers) + 1} processes needs "
                               f"as many shards, got {len(shards)}")
    n, total, summed, order = len(micro_batches), 0.0, {}, None
    published = [procs.grads] + [worker.grads for worker in busy]
    for i, (x, y) in enumerate(micro_batches):
        shards = shard_rows(x.shape[0], workers)
        weights = _weights(y, shards)
        seeds = shard_seeds(rng, len(shards))
        for j, worker in enumerate(busy, start=1):
            order_step(worker, x[shards[j]], y[shards[j]], weights[j] / n, seeds[j], keep=True)

        def here() -> tuple[float, dict]:
            loss, grads = _shard_loss_and_grads(family, params, cfg, x[shards[0]],
                                                y[shards[0]], seeds[0], weights[0] / n)
            for key, box in procs.grads.items():
                box[...] = grads[key]        # the workers' groups, where they read them
            return loss, grads

        first_loss, grads = _while_busy(busy, here)
        losses = [first_loss] + [reply[0] for reply in collect_all(busy)]
        total += float(sum(w * loss for w, loss in zip(weights, losses)))
        order = order or list(grads)             # clip_grad_norm's order: shard 0's grads
        norm = i == n - 1 and grad_clip > 0.0    # ||g||^2 once every micro-batch is in
        for worker in busy:
            order_reduce(worker, first=i == 0, norm=norm)
        mine = _while_busy(busy, lambda: reduce_group(procs.keys, 0, grads, published, summed,
                                                      first=i == 0, norm=norm))
        squares = dict(zip(procs.keys, mine))
        for worker, reply in zip(busy, collect_all(busy)):
            squares.update(zip(worker.keys, reply))
    coef = 1.0
    if grad_clip > 0.0:
        coef = clip_coefficient(global_norm(squares[key] for key in order), grad_clip)
    t = opt.t
    for worker in busy:
        order_adamw(worker, coef=coef, t=t, **hyper)
    _while_busy(busy, lambda: update_group(procs.keys, params, opt, summed, coef=coef, t=t,
                                           **hyper))
    collect_all(busy)
    return total / n, AdamWState(m=opt.m, v=opt.v, t=t + 1)


def share_run_arrays(params: dict, opt: AdamWState) -> tuple[dict, AdamWState]:
    """params and AdamW moments copied into shared memory, for `parallel_workers` (the worker
    processes read and update these very arrays)."""
    return share_arrays(params), AdamWState(m=share_arrays(opt.m), v=share_arrays(opt.v), t=opt.t)


@contextmanager
def parallel_workers(family, cfg, params: dict, opt: AdamWState, *, workers: int,
                     batch_size: int, block_size: int) -> Iterator[WorkerProcesses | None]:
    """W - 1 worker processes for shards 1.. (None when W = 1), BLAS held to one thread.

    params and opt must come from `share_run_arrays`. Worker i owns group i of
    `balanced_groups(params, W)` in `parallel_train_step`; this process owns group 0.
    note: with OpenBLAS's own two threads inside every process's products, four threads would
    fight over two cores (a much slower step: docs/performance.md). Where BLAS cannot be held to
    one thread (see glassformer/blas.py) no worker starts: the shards run in turn here, with the
    same numbers.
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
                              block_size=block_size, groups=groups) as procs:
            yield procs
