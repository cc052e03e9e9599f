"""Keep freed memory for reuse instead of handing it back to the OS (glibc only).

Every NumPy op returns a fresh array. glibc serves blocks above 128 KiB with a new mmap and
unmaps them on free, so the next array of that size page-faults its way in again: a training
step over (B, T, 4C) activations spends a large share of its time in those faults
(docs/performance.md). Raising glibc's mmap and
trim thresholds makes freed blocks stay in the heap and be reused, as PyTorch's caching
allocator does for its tensors. Values are unchanged; only where the bytes come from.

`keep_freed_memory()` is called once by the command-line entry point (and the benches); library
users can call it themselves. It does nothing where glibc's mallopt is unavailable.
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1   # glibc malloc.h: give memory back to the OS only above this much free
M_MMAP_THRESHOLD = -3   # glibc malloc.h: blocks at least this big get their own mmap
THRESHOLD_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Raise glibc's mmap/trim thresholds to 1 GiB. Returns whether it took effect."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok_mmap = mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) == 1
    ok_trim = mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES) == 1
    return ok_mmap and ok_trim
