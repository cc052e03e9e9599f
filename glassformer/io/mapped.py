"""Handing back the pages of a memory-mapped file that no param reads any more.

A GGUF file's quantized blocks are views of the file's memory map (io/gguf.py): pages of the
file, counted in the process's resident memory once touched (loading touches every one: each
block's scales are checked). Some of those views are replaced at load by copies: q and k with
their RoPE rows reordered, and q | k | v, gate | up packed into one array each
(models/layout.py). The copy is what the products read from then on, yet the original pages
stay resident, counted twice. `release_pages` tells the kernel this process no longer needs
them (madvise MADV_DONTNEED): they leave its resident set at once and stay in the page cache,
so a later read (none is made) would simply fault them back in from the file's unchanged bytes.
On a read-only map that is all it does: no byte of the file or of any other view changes.

Only whole pages inside an array's own bytes are released: a page it shares with a neighbour
that is still read (a norm, wo, down) stays. An array that is not a view of a map (a copy, a
float32 param), or a platform without madvise, is left alone.
"""
from __future__ import annotations

import mmap

import numpy as np


def _mapping(array: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The mmap the array's bytes lie in and its start address, or None when they do not."""
    base = array
    while isinstance(base, np.ndarray):
        if isinstance(base.base, mmap.mmap):
            start = np.frombuffer(base.base, np.uint8, count=1).__array_interface__["data"][0]
            return base.base, start
        base = base.base
    return None


def release_pages(array: np.ndarray) -> int:
    """Drop the whole pages of a memory-mapped array's bytes from this process's resident set;
    returns how many bytes were released (0 for an array that is not a map's view)."""
    found = _mapping(array)
    if found is None or not hasattr(mmap, "MADV_DONTNEED") or not array.flags.c_contiguous:
        return 0
    handle, start = found
    first = array.__array_interface__["data"][0] - start               # its offset in the map
    lo = -(-first // mmap.PAGESIZE) * mmap.PAGESIZE                    # first whole page
    hi = (first + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE       # end of the last one
    if hi <= lo:
        return 0
    try:
        handle.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    except (OSError, ValueError):
        return 0     # a map that refuses the advice keeps its pages: only memory, never numbers
    return hi - lo
