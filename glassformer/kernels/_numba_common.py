"""What every training kernel module shares: numba's two compile settings and the array tests
that decide whether a kernel takes its inputs (else the caller runs the NumPy twin).

FAST reassociates sums (SIMD lanes) and fuses multiply-adds, and keeps the inf/NaN rules; EXACT
changes nothing about float rounding (AdamW: torch's operations one by one). Both use
error_model="numpy": a division by zero gives inf, as in NumPy, and (as important here) no
per-element check stops a loop from being vectorized. cache=True: compiled once per machine.
"""
from __future__ import annotations

import numba
import numpy as np

FAST = {"reassoc", "contract", "arcp"}
jit = numba.njit(cache=True, fastmath=FAST, nogil=True, error_model="numpy")
exact = numba.njit(cache=True, nogil=True, error_model="numpy")
# the threaded twins (numba.prange over rows), chosen when numba's thread count is above one


def rows_of(x: np.ndarray) -> np.ndarray:
    """x (..., C) C-contiguous -> (N, C), a view."""
    return x.reshape(-1, x.shape[-1])


def compiled_dtype(*arrays) -> bool:
    """Whether the kernels take these arrays: one float dtype (32 or 64 bit), C-contiguous."""
    dtype = arrays[0].dtype
    return (dtype in (np.float32, np.float64)
            and all(a.dtype == dtype and a.flags.c_contiguous for a in arrays))
