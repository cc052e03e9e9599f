"""NumPy's own BLAS matrix-vector product, callable from inside a compiled loop.

A decoded token of a narrow model (SmolLM2: 30 layers of width 576) is ~240 calls from Python:
each layer's four products (`xn @ W`, NumPy to OpenBLAS) and the four kernels between them. At
two threads a product of a narrow layer takes 50-250 µs, and every call around it costs a few µs
of Python, argument checks and dispatch: together about a tenth of a token. Called from inside a
numba function, the same OpenBLAS routine (`cblas_sgemv`, with the same arguments NumPy's
`matmul` gives it for a (1, K) @ (K, N) product, so the same numbers and the same threads) lets a
whole layer be one call from Python (kernels/decode_layer_numba.py).

How it is found: the BLAS library NumPy loaded (threadpoolctl lists it, with its file; its
symbols carry the wheel's prefix and suffix, e.g. `scipy_cblas_sgemv64_` in NumPy's
scipy-openblas64), opened with ctypes for its address, which is given to LLVM under a fixed
name (`glassformer_cblas_sgemv`). The compiled code calls that name, so numba's disk cache holds
no address: a later process registers the name again (this module's import) before loading it.
The integer arguments are declared 64-bit: right for an ILP64 BLAS, and on x86-64 and AArch64
an LP64 one reads the same value from the register's low half.

Where no such library is found (another NumPy build, a BLAS threadpoolctl cannot see),
`FOUND` is False and nothing here may be called: the decode step then makes its products from
Python as before (blocks/decode_step.py). The matrix a product takes must have one unit stride
(row-major W, or the transpose view of a row-major W^T), as NumPy's BLAS call needs too.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import llvmlite.binding as llvm
import numba
import numpy as np
from numba import types

SYMBOL = "glassformer_cblas_sgemv"
# the names cblas_sgemv has in the BLAS copies NumPy ships or links (64-bit integer ones first)
NAMES = ("scipy_cblas_sgemv64_", "cblas_sgemv64_", "scipy_cblas_sgemv", "cblas_sgemv")
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112           # CBLAS_ORDER, CBLAS_TRANSPOSE values


def _numpy_blas_address() -> int | None:
    """The address of cblas_sgemv in the BLAS library NumPy loaded, or None."""
    from threadpoolctl import ThreadpoolController

    numpy_dir = Path(np.__file__).resolve().parent.parent      # site-packages (numpy.libs too)
    for info in ThreadpoolController().select(user_api="blas").info():
        path = Path(info["filepath"]).resolve()
        if not (path.is_relative_to(numpy_dir / "numpy")
                or path.is_relative_to(numpy_dir / "numpy.libs")):
            continue                         # SciPy's or torch's copy: another thread pool
        library = ctypes.CDLL(str(path))
        for name in NAMES:
            function = getattr(library, name, None)
            if function is not None:
                return ctypes.cast(function, ctypes.c_void_p).value
    return None


_ADDRESS = _numpy_blas_address()
FOUND = _ADDRESS is not None
if FOUND:
    llvm.add_symbol(SYMBOL, _ADDRESS)

# void cblas_sgemv(order, trans, M, N, alpha, A, lda, X, incX, beta, Y, incY)
_sgemv = types.ExternalFunction(SYMBOL, types.void(
    types.int32, types.int32, types.int64, types.int64, types.float32, types.voidptr,
    types.int64, types.voidptr, types.int64, types.float32, types.voidptr, types.int64))


@numba.njit(cache=True, nogil=True)
def matvec_into(x, w, y):
    """y (N,) = x (K,) @ w (K, N), float32, by NumPy's BLAS. w row-major (unit stride along N)
    or the transpose view of a row-major (N, K) (unit stride along K); x, y contiguous."""
    size = w.itemsize
    if w.strides[1] == size:                 # row-major (K, N): RowMajor, Trans
        _sgemv(ROW_MAJOR, TRANS, w.shape[0], w.shape[1], np.float32(1.0), w.ctypes.data,
               w.strides[0] // size, x.ctypes.data, 1, np.float32(0.0), y.ctypes.data, 1)
    else:                                    # w = V.T, V (N, K) row-major: RowMajor, NoTrans
        _sgemv(ROW_MAJOR, NO_TRANS, w.shape[1], w.shape[0], np.float32(1.0), w.ctypes.data,
               w.strides[1] // size, x.ctypes.data, 1, np.float32(0.0), y.ctypes.data, 1)

