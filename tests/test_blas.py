"""BLAS thread limits (glassformer/blas.py): every loaded BLAS is limited inside the block, NumPy's
own copy too when SciPy's comes first, and each gets its old count back after it."""
import pytest

from glassformer.blas import blas_threads, find_blas


def thread_counts() -> list[int]:
    """The thread count of each BLAS library loaded now, in threadpoolctl's order."""
    return [library["num_threads"] for library in find_blas().info()]


def test_blas_threads_are_restored():
    before = thread_counts()
    if not before:
        pytest.skip("no BLAS here that threadpoolctl can control")
    with blas_threads(1) as limited:
        assert limited
        assert thread_counts() == [1] * len(before)
    assert thread_counts() == before


def test_every_openblas_is_limited_numpys_too():
    """SciPy (which transformers' imports bring) loads a second OpenBLAS that comes first in the
    list; NumPy's own copy must be limited as well."""
    pytest.importorskip("scipy.linalg")
    libraries = find_blas().info()
    numpys = [lib for lib in libraries if "numpy" in lib["filepath"]]
    if not numpys:
        pytest.skip("NumPy's BLAS here is not one threadpoolctl can control")
    with blas_threads(1):
        assert all(lib["num_threads"] == 1 for lib in find_blas().info())

