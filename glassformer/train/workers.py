"""Worker processes for data-parallel training: one per extra core, sharing memory with this one.

Why processes and not threads: NumPy releases Python's GIL inside its loops and products, so
threads do run side by side, but every NumPy call hands the GIL back and forth, and each handoff
wakes a sleeping thread. On the training recipe two shards in two threads made a step slower
than a shard here and one in a worker process (figures in docs/performance.md).

How:
- The arrays both sides read or write live in anonymous shared memory (`mmap(-1, n)`, which a
  forked child shares): the params, AdamW's m and v (`share_arrays`, called before the workers
  start), per worker its batch rows and its shard's grads, and this process's shard grads for
  the workers' groups (`WorkerProcesses.grads`). All of it is allocated before the first fork,
  so every process sees every other's buffers.
- `os.fork` (through multiprocessing's "fork" start) makes each worker: the same program with the
  same model family and config, so nothing is serialized to start it.
- Orders and replies are a few bytes through a pipe (`send_bytes` / `recv_bytes`; nothing is ever
  pickled):

      b"S" rows dloss seed keep     forward + backward of the worker's rows; its grads into its
                                    buffer (keep=1: all but its own group's, which it keeps)
      b"R" first norm               add up its group's grads over the shards (a reduce-scatter,
                                    see parallel.py), into a new sum or onto the running one
      b"A" lr b1 b2 eps wd coef t   its group's summed grads times coef (when < 1), then AdamW
      b"L" rows                     eval-mode loss of the worker's rows
      reply b"K" + float64 values (the loss; the group's squared grad norms after R with norm=1),
            or b"E" + the error's text (raised here as GlassformerError)

- A worker ignores Ctrl-C and exits when its pipe closes: when training ends, or when this
  process dies (even by kill -9).

Where "fork" is unavailable (not Linux/macOS) `worker_processes` yields None and the shards run
in turn in this process, with the same numbers.
"""
from __future__ import annotations

import mmap
import multiprocessing
import signal
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.train.optim import AdamWState, adamw_step, scale_grads
from glassformer.train.step import batch_loss, loss_and_grads

_STEP = struct.Struct("<qdqq")           # rows, dloss, seed (-1: no dropout generator), keep
_REDUCE = struct.Struct("<qq")           # first (1: start a new sum), norm (1: reply ||g||^2)
_ADAMW = struct.Struct("<ddddddq")       # lr, beta1, beta2, eps, weight_decay, coef, t
_ROWS = struct.Struct("<q")              # rows


def share_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies of `arrays` in one block of shared memory (a forked worker sees every write)."""
    total = sum(a.nbytes for a in arrays.values())
    block = mmap.mmap(-1, max(total, 1))  # anonymous and MAP_SHARED: shared with forked children
    shared, offset = {}, 0
    for key, a in arrays.items():
        view = np.frombuffer(block, a.dtype, a.size, offset).reshape(a.shape)
        view[...] = a
        shared[key] = view
        offset += a.nbytes
    return shared


class Worker(NamedTuple):
    """One worker process and what it shares with this one."""
    conn: object           # multiprocessing Connection: orders out, replies in
    process: object        # the multiprocessing Process
    shard: int             # the shard it runs, 1..W-1 (this process runs shard 0)
    x: np.ndarray          # (B_max, T) int64: the rows of its shard, written here before an order
    y: np.ndarray          # (B_max, T) int64
    grads: dict            # its shard's grads, param shapes, written by the worker
    keys: list[str]        # its group: the params whose grads it sums and whose AdamW it runs


def reduce_group(keys, shard: int, kept: dict, published: list[dict], summed: dict, *,
                 first: bool, norm: bool) -> list[float]:
    """Sum each key's gradient over the shards into `summed`, in place; returns each key's
    ||summed||^2 when `norm` (else []).

    The shards are added in shard order, ((g_0 + g_1) + g_2) + ...: this process's own grads
    (`kept`, arrays it may overwrite) for shard `shard`, published[i] for shard i. first: the sum
    replaces what `summed` held, else it is added on (gradient accumulation, in micro-batch
    order). The same float32 sums as `parallel_loss_and_grads`'s fan-in, and each norm is taken
    while its gradient is still in cache.
    """
    if first:
        summed.clear()
    squares = []
    for key in keys:
        terms = [kept[key] if i == shard else box[key] for i, box in enumerate(published)]
        out = kept[key] if shard <= 1 else None           # g_0 + g_1 may land in our own g
        total = np.add(terms[0], terms[1], out=out)
        for term in terms[2:]:
            total += term
        if first:
            summed[key] = total
        else:
            summed[key] += total
        if norm:
            flat = summed[key].reshape(-1)
            squares.append(float(np.dot(flat, flat)))     # as optim.squared_norms
    return squares


def update_group(keys, params: dict, opt: AdamWState, summed: dict, *, coef: float, t: int,
                 **hyper) -> None:
    """The optimizer step of one group: its summed grads times the clip coefficient `coef`
    (when < 1), then AdamW at step t + 1 on those params and moments, all in place."""
    scale_grads(summed, coef)
    group = AdamWState(m={k: opt.m[k] for k in keys}, v={k: opt.v[k] for k in keys}, t=t)
    adamw_step({k: params[k] for k in keys}, summed, group, **hyper)


def _reply(conn, work) -> None:
    """Run `work()` and send b"K" + the float64 values it returns, or b"E" + the error's text."""
    try:
        values = work()
        reply = b"K" + struct.pack(f"<{len(values)}d", *values)
    except Exception as error:  # noqa: BLE001 - the text goes back; this process must live on
        text = str(error) if isinstance(error, GlassformerError) else \
            f"{type(error).__name__}: {error}"
        reply = b"E" + text.encode("utf-8")
    conn.send_bytes(reply)


def _serve(conn, family, cfg, params: dict, opt: AdamWState, me: Worker, published: list[dict],
           parent_ends: list) -> None:
    """A worker's loop: obey orders until the pipe closes.

    published[i]: where shard i's grads are published (this process's own buffer included).
    parent_ends: the parent's ends of every worker pipe, which fork copied into this process;
    closed first, so that when the parent closes its copies (or dies) the pipe really ends.
    """
    for end in parent_ends:
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which closes the pipe
    kept: dict = {}   # the worker's own group's grads of its last "keep" step
    summed: dict = {}  # its group's grads summed over shards (and micro-batches) so far

    def step(rows: int, dloss: float, seed: int, keep: int) -> list[float]:
        rng = None if seed < 0 else np.random.default_rng(seed)
        loss, grads = loss_and_grads(family, params, cfg, me.x[:rows], me.y[:rows], rng=rng,
                                     dloss=dloss)
        kept.clear()
        for key, g in grads.items():
            if keep and key in own:
                kept[key] = g
            else:
                me.grads[key][...] = g
        return [loss]

    def reduce(first: int, norm: int) -> list[float]:
        if not kept and me.keys:
            raise GlassformerError("reduce ordered before a step that keeps the group's grads")
        squares = reduce_group(me.keys, me.shard, kept, published, summed, first=bool(first),
                               norm=bool(norm))
        kept.clear()
        return squares

    def adamw(lr, beta1, beta2, eps, weight_decay, coef, t) -> list[float]:
        if summed.keys() != own:
            raise GlassformerError("AdamW ordered before the group's grads were summed")
        update_group(me.keys, params, opt, summed, coef=coef, t=t, lr=lr, beta1=beta1,
                     beta2=beta2, eps=eps, weight_decay=weight_decay)
        summed.clear()
        return []

    def loss(rows: int) -> list[float]:
        return [batch_loss(family, params, cfg, me.x[:rows], me.y[:rows])]

    own = set(me.keys)
    orders = {b"S": (step, _STEP), b"R": (reduce, _REDUCE), b"A": (adamw, _ADAMW),
              b"L": (loss, _ROWS)}
    while True:
        try:
            order = conn.recv_bytes()
            work, layout = orders[order[:1]]
            _reply(conn, lambda: work(*layout.unpack(order[1:])))
        except (EOFError, OSError):  # the parent closed the pipe, or is gone
            return


class WorkerProcesses(NamedTuple):
    """The running workers (shard i + 1 goes to workers[i]) and what this process publishes."""
    workers: list[Worker]
    keys: list[str]        # this process's group (shard 0's): every key no worker holds
    grads: dict            # this process's shard grads for the workers' groups, published here


def _died(worker: Worker) -> GlassformerError:
    return GlassformerError(f"training worker process {worker.process.pid} died "
                            f"(exit code {worker.process.exitcode})")


def _send(worker: Worker, order: bytes) -> None:
    try:
        worker.conn.send_bytes(order)
    except OSError:  # a broken pipe: the worker is gone
        raise _died(worker) from None


def order_step(worker: Worker, x: np.ndarray, y: np.ndarray, dloss: float, seed: int | None,
               *, keep: bool = False) -> None:
    """Hand `worker` its rows and start its forward + backward (collect with `collect`).

    keep=False: it publishes every grad in `worker.grads`. keep=True: it keeps its own group's
    grads for the `order_reduce` that follows, and publishes the rest."""
    rows = x.shape[0]
    worker.x[:rows], worker.y[:rows] = x, y
    _send(worker, b"S" + _STEP.pack(rows, dloss, -1 if seed is None else seed, int(keep)))


def order_reduce(worker: Worker, *, first: bool, norm: bool) -> None:
    """Start the sum of the worker's group over the shards, once every shard's grads are
    published. first: start a new sum (else add onto the last); norm: reply its ||g||^2."""
    _send(worker, b"R" + _REDUCE.pack(int(first), int(norm)))


def order_adamw(worker: Worker, *, coef: float, lr: float, beta1: float, beta2: float,
                eps: float, weight_decay: float, t: int) -> None:
    """Start AdamW on the worker's group with its summed grads scaled by coef (when < 1)."""
    _send(worker, b"A" + _ADAMW.pack(lr, beta1, beta2, eps, weight_decay, coef, t))


def order_loss(worker: Worker, x: np.ndarray, y: np.ndarray) -> None:
    """Hand `worker` its rows and start an eval-mode loss."""
    rows = x.shape[0]
    worker.x[:rows], worker.y[:rows] = x, y
    _send(worker, b"L" + _ROWS.pack(rows))


def collect_all(workers: list[Worker]) -> list[tuple[float, ...]]:
    """Every worker's reply, in order. All are read (none is left behind for the next order)
    before the first error among them is raised."""
    replies, first_error = [], None
    for worker in workers:
        try:
            replies.append(collect(worker))
        except GlassformerError as error:
            first_error = first_error or error
    if first_error is not None:
        raise first_error
    return replies


def collect(worker: Worker) -> tuple[float, ...]:
    """Wait for the worker's reply: its values (a loss, squared norms), or its error raised here."""
    try:
        reply = worker.conn.recv_bytes()
    except (EOFError, OSError):
        raise _died(worker) from None
    if reply[:1] == b"E":
        raise GlassformerError(reply[1:].decode("utf-8"))
    return struct.unpack(f"<{(len(reply) - 1) // 8}d", reply[1:])


@contextmanager
def worker_processes(family, cfg, params: dict, opt: AdamWState, *, n_workers: int,
                     batch_rows: int, block_size: int, groups: list[list[str]]
                     ) -> Iterator[WorkerProcesses | None]:
    """Start `n_workers` workers (None when there are none to start, or no "fork" here).

    params, opt.m and opt.v must already be shared (`share_arrays`): the workers read and update
    those very arrays. batch_rows: the most rows one shard gets. groups[0]: this process's keys,
    groups[i]: worker i's (n_workers + 1 groups that cover every param once).
    """
    if n_workers < 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield None
        return
    if len(groups) != n_workers + 1 or sorted(k for g in groups for k in g) != sorted(params):
        raise GlassformerError(f"expected {n_workers + 1} groups covering every param once, "
                               f"got {len(groups)}")
    context = multiprocessing.get_context("fork")
    zeros = {k: np.zeros_like(p) for k, p in params.items()}
    # Every shared buffer exists before the first fork, so each worker sees all of them.
    ours = WorkerProcesses(workers=[], keys=list(groups[0]),
                           grads=share_arrays({k: zeros[k] for k in zeros if k not in groups[0]}))
    planned = []
    for shard, keys in enumerate(groups[1:], start=1):
        ids = share_arrays({"x": np.zeros((batch_rows, block_size), np.int64),
                            "y": np.zeros((batch_rows, block_size), np.int64)})
        planned.append(Worker(conn=None, process=None, shard=shard, x=ids["x"], y=ids["y"],
                              grads=share_arrays(zeros), keys=list(keys)))
    published = [ours.grads] + [me.grads for me in planned]
    workers = ours.workers
    try:
        for me in planned:
            mine, theirs = context.Pipe()
            parent_ends = [mine] + [worker.conn for worker in workers]
            process = context.Process(target=_serve, daemon=True, name="glassformer-worker",
                                      args=(theirs, family, cfg, params, opt, me, published,
                                            parent_ends))
            process.start()
            theirs.close()
            workers.append(me._replace(conn=mine, process=process))
        yield ours
    finally:
        for worker in workers:
            worker.conn.close()  # the worker reads end-of-file and returns
        for worker in workers:
            worker.process.join(timeout=10)
            if worker.process.is_alive():
                worker.process.terminate()


def peak_rss_mib(workers: WorkerProcesses | None) -> float:
    """Sum of the workers' peak resident memory (VmHWM), MiB; shared pages count in each."""
    total = 0.0
    for worker in workers.workers if workers else []:
        status = Path(f"/proc/{worker.process.pid}/status")
        for line in status.read_text().splitlines() if status.is_file() else []:
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024.0
    return total
