"""Data parallelism across CPU cores: one shard of the batch per core, gradients summed.

A batch of B sequences is cut by rows into W shards (W = workers). Each shard runs the model's
forward and backward in its own thread, and the shard gradients are added up:

    x (B, T) -> x_0 (B_0, T), ..., x_{W-1} (B_{W-1}, T)         B_0 + ... + B_{W-1} = B
    loss = sum_i n_i loss_i / N        grads = sum_i d(n_i loss_i / N)/d params

where n_i counts the targets of shard i the loss averages over (N in all), so the sum is exactly
the gradient of the whole batch's mean loss, only added up in another order: the same numbers to
float32 rounding. This is what torch's DistributedDataParallel does across GPUs, here across the
cores of one CPU. It pays off because NumPy runs elementwise ops on one core: splitting each op
over cores (as torch does) is not available to us, but splitting the batch is, and NumPy releases
Python's GIL inside its loops and matrix products, so the shards really run at the same time.
Each shard's matrix products should then run on its own thread (see glassformer/blas.py).

The caller owns the thread pool (W - 1 threads; shard 0 runs on the calling thread) and passes it
in, so nothing is started behind its back. With one worker everything runs as a plain call.

Dropout: with W > 1 each shard draws its masks from its own generator, seeded from `rng`, so a
run is reproducible for a given W, and runs with different W differ in their dropout masks.
"""
from __future__ import annotations

import os
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from glassformer.blas import blas_threads
from glassformer.errors import GlassformerError
from glassformer.train.optim import AdamWState, adamw_step
from glassformer.train.step import batch_loss, loss_and_grads

IGNORE_INDEX = -100  # cross_entropy_forward's default: targets equal to it are not counted
R = TypeVar("R")


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


@contextmanager
def worker_pool(workers: int) -> Iterator[Executor | None]:
    """W - 1 threads for shards 1.. (None for W = 1), with BLAS kept to one thread per product.

    note: OpenBLAS would otherwise start a second thread inside every shard's products, and the
    shards' threads would take turns on the same cores instead of running side by side (2.3x
    slower on two cores). Where BLAS cannot be limited (see glassformer/blas.py) this yields None:
    the shards then run one after another, with the same numbers.
    """
    if workers <= 1:
        yield None
        return
    with blas_threads(1) as limited:
        if not limited:
            yield None
            return
        with ThreadPoolExecutor(max_workers=workers - 1) as pool:
            yield pool


def shard_rows(batch_size: int, workers: int) -> list[slice]:
    """Split B rows into min(W, B) contiguous, near-equal slices (the first ones one row longer).

    >>> shard_rows(5, 2)
    [slice(0, 3, None), slice(3, 5, None)]
    """
    if workers < 1:
        raise GlassformerError(f"expected at least 1 worker, got {workers}")
    n = min(workers, batch_size)
    bounds = np.linspace(0, batch_size, n + 1).round().astype(int)  # n + 1 cut points
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def map_shards(fn: Callable[[int], R], n_shards: int, pool: Executor | None) -> list[R]:
    """[fn(0), ..., fn(n - 1)]: shards 1.. on the pool's threads, shard 0 on this one.

    Results come back in shard order, so every sum over them is made in the same order and a run
    is reproducible. An exception in any shard is raised here.
    """
    if n_shards == 1 or pool is None:
        return [fn(i) for i in range(n_shards)]
    futures = [pool.submit(fn, i) for i in range(1, n_shards)]
    first = fn(0)
    return [first] + [future.result() for future in futures]


def counted_targets(y: np.ndarray) -> int:
    """How many targets the mean loss averages over (all but IGNORE_INDEX)."""
    return int(np.count_nonzero(y != IGNORE_INDEX))


def shard_generators(rng: np.random.Generator | None, n: int
                     ) -> Sequence[np.random.Generator | None]:
    """One generator per shard: `rng` itself for a single shard, else children seeded from it."""
    if rng is None:
        return [None] * n
    if n == 1:
        return [rng]
    seeds = rng.integers(0, 2**63, size=n)  # advances rng: its saved state covers the children
    return [np.random.default_rng(int(seed)) for seed in seeds]


def _weights(y: np.ndarray, shards: list[slice]) -> list[float]:
    """n_i / N for each shard (n_i / 1 when nothing is counted, so every weight is 0)."""
    counts = [counted_targets(y[rows]) for rows in shards]
    total = sum(counts)
    return [count / max(total, 1) for count in counts]


def parallel_loss_and_grads(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                            rng: np.random.Generator | None, dloss: float = 1.0,
                            workers: int = 1, pool: Executor | None = None
                            ) -> tuple[float, dict]:
    """`step.loss_and_grads` over min(W, B) shards of the batch; same loss and grads.

    x, y (B, T). The grads of shard 0 are the returned dict; the others are added into it, in
    shard order.
    """
    shards = shard_rows(x.shape[0], workers)
    if len(shards) == 1:
        return loss_and_grads(family, params, cfg, x, y, rng=rng, dloss=dloss)
    weights = _weights(y, shards)
    rngs = shard_generators(rng, len(shards))

    def run(i: int) -> tuple[float, dict]:
        rows = shards[i]
        return loss_and_grads(family, params, cfg, x[rows], y[rows], rng=rngs[i],
                              dloss=dloss * weights[i])

    results = map_shards(run, len(shards), pool)
    loss = sum(weight * shard_loss for weight, (shard_loss, _) in zip(weights, results))
    grads = results[0][1]
    for _, shard_grads in results[1:]:
        for key, g in shard_grads.items():
            grads[key] += g  # fan-in: every shard's gradient of its part of the batch loss
    return float(loss), grads


def parallel_batch_loss(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                        workers: int = 1, pool: Executor | None = None) -> float:
    """`step.batch_loss` (eval mode, forward only) over min(W, B) shards of the batch."""
    shards = shard_rows(x.shape[0], workers)
    if len(shards) == 1:
        return batch_loss(family, params, cfg, x, y)
    weights = _weights(y, shards)
    losses = map_shards(lambda i: batch_loss(family, params, cfg, x[shards[i]], y[shards[i]]),
                        len(shards), pool)
    return float(sum(weight * loss for weight, loss in zip(weights, losses)))


def balanced_groups(params: dict[str, np.ndarray], n: int) -> list[list[str]]:
    """Split the keys into n groups holding about the same number of values (largest first,
    each to the lightest group so far). Empty groups are dropped.

    >>> balanced_groups({"a": np.zeros(4), "b": np.zeros(3), "c": np.zeros(2)}, 2)
    [['a'], ['b', 'c']]
    """
    groups: list[list[str]] = [[] for _ in range(n)]
    loads = [0] * n
    for key in sorted(params, key=lambda k: -params[k].size):
        lightest = loads.index(min(loads))
        groups[lightest].append(key)
        loads[lightest] += params[key].size
    return [group for group in groups if group]


def parallel_adamw_step(params: dict, grads: dict, state: AdamWState, *, workers: int = 1,
                        pool: Executor | None = None, **hyper) -> tuple[dict, AdamWState]:
    """`optim.adamw_step` with the parameters split over W threads; the same update.

    AdamW updates every parameter on its own, so each group of keys is one independent call;
    the arrays are updated in place, as `adamw_step` does. `hyper`: adamw_step's keywords.
    """
    groups = balanced_groups(params, workers)
    if len(groups) <= 1 or pool is None:
        return adamw_step(params, grads, state, **hyper)
    if set(grads) != set(params):  # let adamw_step name the mismatch
        return adamw_step(params, grads, state, **hyper)
    decay = hyper.pop("decay", None)

    def run(i: int) -> AdamWState:
        keys = groups[i]
        part = AdamWState(m={k: state.m[k] for k in keys}, v={k: state.v[k] for k in keys},
                          t=state.t)
        group_decay = None if decay is None else [k for k in keys if k in decay]
        _, after = adamw_step({k: params[k] for k in keys}, {k: grads[k] for k in keys}, part,
                              decay=group_decay, **hyper)
        return after

    steps = map_shards(run, len(groups), pool)
    return params, AdamWState(m=state.m, v=state.v, t=steps[0].t)
