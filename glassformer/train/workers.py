"""Worker processes for data-parallel training: one per extra core, sharing memory with this one.

Why processes and not threads: NumPy releases Python's GIL inside its loops and products, so
threads do run side by side, but every NumPy call hands the GIL back and forth, and each handoff
wakes a sleeping thread. Measured on the training recipe, two shards in two threads took 51-63 ms
a step where a shard and a worker process took 46-56 ms (each shard alone: ~40 ms).

How:
- The arrays both sides read or write live in anonymous shared memory (`mmap(-1, n)`, which a
  forked child shares): the params, AdamW's m and v (`share_arrays`, called before the workers
  start), and per worker its batch rows, its shard's grads and the grads its AdamW group reads.
- `os.fork` (through multiprocessing's "fork" start) makes each worker: the same program with the
  same model family and config, so nothing is serialized to start it.
- Orders and replies are a few bytes through a pipe (`send_bytes` / `recv_bytes`; nothing is ever
  pickled):

      b"S" rows, dloss, seed        forward + backward of the worker's rows; grads into its buffer
      b"L" rows                     eval-mode loss of the worker's rows
      b"A" lr b1 b2 eps wd t        AdamW on the worker's group of params
      reply b"K" + loss, or b"E" + the error's text (raised here as GlassformerError)

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
from glassformer.train.optim import AdamWState, adamw_step
from glassformer.train.step import batch_loss, loss_and_grads

_STEP = struct.Struct("<qdq")            # rows, dloss, seed (-1: no dropout generator)
_ROWS = struct.Struct("<q")              # rows
_ADAMW = struct.Struct("<dddddq")        # lr, beta1, beta2, eps, weight_decay, t
_LOSS = struct.Struct("<d")


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
    x: np.ndarray          # (B_max, T) int64: the rows of its shard, written here before an order
    y: np.ndarray          # (B_max, T) int64
    grads: dict            # its shard's grads, param shapes
    keys: list[str]        # its AdamW group
    group_grads: dict      # grads of its AdamW group, written here before an "A" order


def _reply(conn, work) -> None:
    """Run `work()` and send b"K" + its loss, or b"E" + the error's text."""
    try:
        reply = b"K" + _LOSS.pack(work())
    except Exception as error:  # noqa: BLE001 - the text goes back; this process must live on
        text = str(error) if isinstance(error, GlassformerError) else \
            f"{type(error).__name__}: {error}"
        reply = b"E" + text.encode("utf-8")
    conn.send_bytes(reply)


def _serve(conn, family, cfg, params: dict, opt: AdamWState, me: Worker, parent_ends: list
           ) -> None:
    """A worker's loop: obey orders until the pipe closes.

    parent_ends: the parent's ends of every worker pipe, which fork copied into this process;
    closed first, so that when the parent closes its copies (or dies) the pipe really ends.
    """
    for end in parent_ends:
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which closes the pipe

    def step(rows: int, dloss: float, seed: int) -> float:
        rng = None if seed < 0 else np.random.default_rng(seed)
        loss, grads = loss_and_grads(family, params, cfg, me.x[:rows], me.y[:rows], rng=rng,
                                     dloss=dloss)
        for key, g in grads.items():
            me.grads[key][...] = g
        return loss

    def adamw(lr, beta1, beta2, eps, weight_decay, t) -> float:
        group = AdamWState(m={k: opt.m[k] for k in me.keys}, v={k: opt.v[k] for k in me.keys}, t=t)
        adamw_step({k: params[k] for k in me.keys}, me.group_grads, group, lr=lr, beta1=beta1,
                   beta2=beta2, eps=eps, weight_decay=weight_decay)
        return 0.0

    def loss(rows: int) -> float:
        return batch_loss(family, params, cfg, me.x[:rows], me.y[:rows])

    orders = {b"S": (step, _STEP), b"L": (loss, _ROWS), b"A": (adamw, _ADAMW)}
    while True:
        try:
            order = conn.recv_bytes()
            work, layout = orders[order[:1]]
            _reply(conn, lambda: work(*layout.unpack(order[1:])))
        except (EOFError, OSError):  # the parent closed the pipe, or is gone
            return


class WorkerProcesses(NamedTuple):
    """The running workers (shard i + 1 goes to workers[i])."""
    workers: list[Worker]


def _died(worker: Worker) -> GlassformerError:
    return GlassformerError(f"training worker process {worker.process.pid} died "
                            f"(exit code {worker.process.exitcode})")


def _send(worker: Worker, order: bytes) -> None:
    try:
        worker.conn.send_bytes(order)
    except OSError:  # a broken pipe: the worker is gone
        raise _died(worker) from None


def order_step(worker: Worker, x: np.ndarray, y: np.ndarray, dloss: float, seed: int | None
               ) -> None:
    """Hand `worker` its rows and start its forward + backward (collect with `collect`)."""
    rows = x.shape[0]
    worker.x[:rows], worker.y[:rows] = x, y
    _send(worker, b"S" + _STEP.pack(rows, dloss, -1 if seed is None else seed))


def order_loss(worker: Worker, x: np.ndarray, y: np.ndarray) -> None:
    """Hand `worker` its rows and start an eval-mode loss."""
    rows = x.shape[0]
    worker.x[:rows], worker.y[:rows] = x, y
    _send(worker, b"L" + _ROWS.pack(rows))


def order_adamw(worker: Worker, grads: dict, *, lr: float, beta1: float, beta2: float,
                eps: float, weight_decay: float, t: int) -> None:
    """Copy the grads of the worker's group where it reads them and start its AdamW step."""
    for key in worker.keys:
        worker.group_grads[key][...] = grads[key]
    _send(worker, b"A" + _ADAMW.pack(lr, beta1, beta2, eps, weight_decay, t))


def collect_all(workers: list[Worker]) -> list[float]:
    """Every worker's reply, in order. All are read (none is left behind for the next order)
    before the first error among them is raised."""
    losses, first_error = [], None
    for worker in workers:
        try:
            losses.append(collect(worker))
        except GlassformerError as error:
            first_error = first_error or error
    if first_error is not None:
        raise first_error
    return losses


def collect(worker: Worker) -> float:
    """Wait for the worker's reply: its loss, or its error raised here."""
    try:
        reply = worker.conn.recv_bytes()
    except (EOFError, OSError):
        raise _died(worker) from None
    if reply[:1] == b"E":
        raise GlassformerError(reply[1:].decode("utf-8"))
    return _LOSS.unpack(reply[1:])[0]


@contextmanager
def worker_processes(family, cfg, params: dict, opt: AdamWState, *, n_workers: int,
                     batch_rows: int, block_size: int, groups: list[list[str]]
                     ) -> Iterator[WorkerProcesses | None]:
    """Start `n_workers` workers (None when there are none to start, or no "fork" here).

    params, opt.m and opt.v must already be shared (`share_arrays`): the workers read and update
    those very arrays. batch_rows: the most rows one shard gets. groups[i]: worker i's AdamW keys.
    """
    if n_workers < 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield None
        return
    context = multiprocessing.get_context("fork")
    workers = []
    try:
        for keys in groups[:n_workers]:
            ids = share_arrays({"x": np.zeros((batch_rows, block_size), np.int64),
                                "y": np.zeros((batch_rows, block_size), np.int64)})
            zeros = {k: np.zeros_like(p) for k, p in params.items()}
            me = Worker(conn=None, process=None, x=ids["x"], y=ids["y"],
                        grads=share_arrays(zeros), keys=keys,
                        group_grads=share_arrays({k: zeros[k] for k in keys}))
            ours, theirs = context.Pipe()
            parent_ends = [ours] + [worker.conn for worker in workers]
            process = context.Process(target=_serve, daemon=True, name="glassformer-worker",
                                      args=(theirs, family, cfg, params, opt, me, parent_ends))
            process.start()
            theirs.close()
            workers.append(me._replace(conn=ours, process=process))
        yield WorkerProcesses(workers)
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
