"""How many threads NumPy's BLAS may use for one matrix product.

By default OpenBLAS splits every product over all cores. That is right when one product is all the
work there is, and wrong when the program already keeps every core busy itself: data-parallel
training (train/parallel.py) runs one batch shard per core, one process each, and a shard's
products must then run on the thread that calls them, or the processes' BLAS threads fight over
the same cores.

`blas_threads(n)` sets the thread count of every BLAS loaded in this process for a `with` block
and puts the old counts back after it. The finding and setting is `threadpoolctl`'s, the library
scikit-learn and joblib use for this (OpenBLAS, MKL and BLIS; Linux, macOS and Windows).
note: it must reach every copy: SciPy (which torch and transformers import) brings a second
OpenBLAS, which comes first in the list, and NumPy's must not be the one left out; threadpoolctl
controls each loaded library separately. Where no BLAS can be controlled it does nothing and
reports so; results never depend on it, only speed does.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np  # noqa: F401  (loads NumPy's BLAS, so that threadpoolctl finds it)
from threadpoolctl import ThreadpoolController


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
    with blas.limit(limits=int(n)):  # restores each library's own count on exit
        yield len(blas.info()) > 0
