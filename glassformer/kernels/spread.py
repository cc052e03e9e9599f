"""Work items spread over threads, each running its products on one BLAS thread.

    spread(items, work, workers, scratch)    work(item, scratch()) for every item

Why not BLAS's own threads: a long prefill's attention is hundreds of small products (a query
tile's (384, 64) x (64, 1024) scores, 0.4 ms on one core), and OpenBLAS wakes, splits and
joins its threads for each of them; its waiting threads spin. On two cores shared with other
programs a stalled thread makes the other spin (docs/performance.md, issue 44's "prefill at two
threads": the same products 40x slower in wall time with two BLAS threads than one). Torch's
fused attention splits the other way: one task per (head, query tile), each running
single-threaded products, one join per call. This does the same: each of `workers` threads
(the caller's among them) takes the next item when it has finished one (causal tiles differ in
cost, and a thread the machine stalls takes fewer), while NumPy's BLAS runs one thread
(`loaded_blas`).

Why Python threads, not numba's prange: the products stay BLAS calls (3-4x faster than numba
loops measured on these shapes), and numba reaches BLAS only through SciPy, which glassformer
does not need. NumPy's products and the nogil compiled loops release the GIL, so the threads
run side by side; between them each item holds the GIL for a few microseconds of Python.
"""
from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

from threadpoolctl import ThreadpoolController

from glassformer.blas import find_blas

Item = TypeVar("Item")


def spread(items: Iterable[Item], work: Callable, workers: int, scratch: Callable) -> None:
    """Call work(item, buffers) for every item, on `workers` threads (1: here, in order, BLAS
    as it is set). Each thread makes its own buffers = scratch() once, so items on one thread
    share them and threads never do. Items must write disjoint outputs. An error in any item
    is raised here, after the threads have stopped."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        buffers = scratch()
        for item in items:
            work(item, buffers)
        return
    queue, lock, failed = iter(items), threading.Lock(), []

    def drain() -> None:
        buffers = scratch()
        while not failed:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            try:
                work(item, buffers)
            except BaseException:
                failed.append(True)      # the other threads stop after their current item
                raise

    others = min(workers, len(items)) - 1
    with loaded_blas().limit(limits=1), ThreadPoolExecutor(others) as pool:
        helpers = [pool.submit(drain) for _ in range(others)]
        try:
            drain()
        finally:
            errors = [helper.exception() for helper in helpers]
    for error in errors:
        if error is not None:
            raise error


@functools.cache
def loaded_blas() -> ThreadpoolController:
    """The BLAS libraries loaded when first asked (blas.py's find_blas), kept: finding them
    reads the process's library list, ~3-5 ms, once per layer otherwise. NumPy's, which the
    items' products call, is loaded with NumPy, so it is always among them; a BLAS loaded later
    (torch's) is not limited here, and nothing here calls it."""
    return find_blas()
