"""BLAS thread limits (glassformer/blas.py): every loaded BLAS is limited inside the block, NumPy's
own copy too when SciPy's comes first, and each gets its old count back after it."""
import os

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



def test_free_cores_is_between_one_and_the_cores_allowed():
    from glassformer.blas import free_cores

    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= free_cores() <= allowed


def test_free_cores_counts_idle_ticks(monkeypatch):
    """Two cores, one of them busy for the whole sample: one is free."""
    from glassformer import blas

    samples = iter([(100.0, 400.0), (150.0, 500.0)])  # 50 of 100 ticks idle across both cores
    monkeypatch.setattr(blas, "cpu_times", lambda cores: next(samples))
    monkeypatch.setattr(blas.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert blas.free_cores(sample_seconds=0.0) == 1


def test_every_command_runs_with_blas_sized_to_the_free_cores(monkeypatch):
    from glassformer.cli import common

    if not thread_counts():
        pytest.skip("no BLAS here that threadpoolctl can control")
    monkeypatch.setattr(common, "free_cores", lambda: 1)
    with common.blas_sized_to_free_cores():
        assert thread_counts() == [1] * len(thread_counts())
