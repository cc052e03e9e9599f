"""How many threads NumPy's BLAS may use for one matrix product.

By default OpenBLAS splits every product over all cores. That is right when one product is all the
work there is, and wrong when the program already keeps every core busy itself: data-parallel
training (train/distributed.py) runs one batch shard per core, one MPI rank each, and a shard's
products must then run on the thread that calls them, or the processes' BLAS threads fight over
the same cores.

`blas_threads(n)` sets the thread count of every BLAS loaded in this process for a `with` block
and puts the old counts back after it; numba's (the compiled quantized products', kernels/),
when numba is loaded, follows it. The finding and setting is `threadpoolctl`'s, the library
scikit-learn and joblib use for this (OpenBLAS, MKL and BLIS; Linux, macOS and Windows).
note: it must reach every copy: SciPy (which torch and transformers import) brings a second
OpenBLAS, which comes first in the list, and NumPy's must not be the one left out; threadpoolctl
controls each loaded library separately. Where no BLAS can be controlled it does nothing and
reports so; results never depend on it, only speed does.

Every command sizes BLAS to the cores that are free when it starts (`free_cores`, applied in
cli/__init__.py): OpenBLAS's threads spin while they wait for each other, so two threads on two
cores, one of them busy with another program (a training run in a second terminal), are many
times slower than one thread (measured in docs/performance.md). The rule: threads = the idle
share of the allowed cores over 50 ms, times their number, rounded, at least 1. A load that
starts after the command has started is not seen; commands that run their own processes set
their own counts inside (training's ranks run one thread each).
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np  # noqa: F401  (loads NumPy's BLAS, so that threadpoolctl finds it)
from threadpoolctl import ThreadpoolController

# How long free_cores watches the cores: /proc/stat counts in 10 ms ticks, so 5 ticks per core.
FREE_CORES_SAMPLE_S = 0.05


def find_blas() -> ThreadpoolController:
    """threadpoolctl's controls of every BLAS library loaded in this process (one per copy)."""
    return ThreadpoolController().select(user_api="blas")


@contextmanager
def blas_threads(n: int) -> Iterator[bool]:
    """Run the `with` block with every loaded BLAS limited to `n` threads; yields whether any was.

    >>> with blas_threads(1) as limited:
    ...     _ = np.ones((2, 2), np.float32) @ np.ones((2, 2), np.float32)
    """
    blas = find_blas()
    numba = sys.modules.get("numba")   # the compiled kernels' threads follow BLAS's, when loaded
    before = numba.get_num_threads() if numba is not None else None
    try:
        if numba is not None:
            numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
        with blas.limit(limits=int(n)):  # restores each library's own count on exit
            yield len(blas.info()) > 0
    finally:
        if numba is not None:
            numba.set_num_threads(before)


def blas_thread_count() -> int:
    """The fewest threads any loaded BLAS may use now (1 when none can be controlled): what
    kernels/choice.py gives numba's compiled kernels when it first loads them."""
    counts = [info["num_threads"] for info in find_blas().info()]
    return max(1, min(counts)) if counts else 1


def cpu_times(cores: set[int]) -> tuple[float, float]:
    """(idle, total) clock ticks so far, summed over `cores`, from Linux's /proc/stat.

    A line reads `cpuN user nice system idle iowait irq softirq steal ...`; idle + iowait is time
    the core had nothing to run.
    """
    idle = total = 0.0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cores:
            continue
        ticks = [float(field) for field in fields[:8]]
        idle += ticks[3] + ticks[4]
        total += sum(ticks)
    return idle, total


def free_cores(sample_seconds: float = FREE_CORES_SAMPLE_S) -> int:
    """How many of the cores this process may run on are idle now (at least 1).

    Measured, not guessed: the idle share of the allowed cores over `sample_seconds`, times their
    number, rounded. A busy loop or a training run on the other core of two gives 1. Where there
    is no /proc/stat (macOS), the 1-minute load average stands in for the busy cores.
    """
    if hasattr(os, "sched_getaffinity"):
        cores = os.sched_getaffinity(0)
    else:
        cores = set(range(os.cpu_count() or 1))
    try:
        idle_before, total_before = cpu_times(cores)
        time.sleep(sample_seconds)
        idle_after, total_after = cpu_times(cores)
    except OSError:
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        return max(1, min(len(cores), round(len(cores) - busy)))
    elapsed = total_after - total_before
    if elapsed <= 0:
        return len(cores)  # no tick passed: nothing to go on, so nothing is held back
    idle_share = (idle_after - idle_before) / elapsed     # 0..1 of all the allowed cores
    return max(1, min(len(cores), int(idle_share * len(cores) + 0.5)))
