"""How many threads NumPy's BLAS (OpenBLAS) may use for one matrix product.

By default OpenBLAS splits every product over all cores. That is right when one product is all the
work there is, and wrong when the program already keeps every core busy itself: data-parallel
training (train/parallel.py) runs one batch shard per core, one process each, and a shard's
products must then run on the thread that calls them, or the processes' BLAS threads fight over
the same cores.

`blas_threads(n)` sets OpenBLAS's thread count for a `with` block and puts the old counts back
after it. It talks to the OpenBLAS libraries already loaded (found in /proc/self/maps, the way
`threadpoolctl` finds them), through OpenBLAS's own `openblas_set_num_threads`. It sets every
copy it finds: SciPy (which torch and transformers import) brings a second OpenBLAS, which comes
first in the list, and NumPy's must not be the one left out. Where none can be found (another
BLAS, another OS) it does nothing and reports so; results never depend on it, only speed does.
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np  # noqa: F401  (loads NumPy's BLAS, which this module looks for)

# OpenBLAS builds rename their exports: NumPy's wheels use scipy-openblas with a 64-bit-int suffix.
_PREFIXES = ("scipy_openblas", "openblas")
_SUFFIXES = ("64_", "")


class BlasControl(NamedTuple):
    """The loaded OpenBLAS's thread getter and setter."""
    get_threads: ctypes._CFuncPtr
    set_threads: ctypes._CFuncPtr


def _loaded_openblas_paths() -> list[str]:
    """Paths of shared libraries with 'openblas' in their name mapped into this process."""
    maps = Path("/proc/self/maps")
    if not maps.is_file():
        return []
    paths = []
    for line in maps.read_text().splitlines():
        path = line.split()[-1] if line.count(" ") >= 5 else ""
        if "openblas" in Path(path).name.lower() and path not in paths:
            paths.append(path)
    return paths


def find_openblas() -> list[BlasControl]:
    """The thread controls of every OpenBLAS loaded in this process (NumPy's among them)."""
    controls = []
    for path in _loaded_openblas_paths():
        try:
            lib = ctypes.CDLL(path)  # already loaded: this returns the same library, not a copy
        except OSError:
            continue
        control = _controls_of(lib)
        if control is not None:
            controls.append(control)
    return controls


def _controls_of(lib: ctypes.CDLL) -> BlasControl | None:
    """The get/set thread functions of one OpenBLAS, under whichever names its build exports."""
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
            setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
            if getter is not None and setter is not None:
                getter.restype, getter.argtypes = ctypes.c_int, []
                setter.restype, setter.argtypes = None, [ctypes.c_int]
                return BlasControl(getter, setter)
    return None


@contextmanager
def blas_threads(n: int) -> Iterator[bool]:
    """Run the `with` block with every OpenBLAS limited to `n` threads; yields whether any was.

    >>> with blas_threads(1) as limited:
    ...     _ = np.ones((2, 2), np.float32) @ np.ones((2, 2), np.float32)
    """
    controls = find_openblas()
    before = [control.get_threads() for control in controls]
    for control in controls:
        control.set_threads(int(n))
    try:
        yield bool(controls)
    finally:
        for control, threads in zip(controls, before):
            control.set_threads(threads)
