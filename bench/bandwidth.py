"""Streaming memory bandwidth: how fast this machine can read a large float32 array.

Decoding one token reads every weight once (bench/generate.py's `bandwidth_share` divides by
the figure here), so the ceiling for tokens/s is this bandwidth over the bytes read per token.
Two ways to stream W (rows x cols float32, --mib in all, far larger than any cache):
    matvec   v @ W with W column-major (Fortran order), the layout decoding multiplies by
             (docs/performance.md, "Column-major weights"), and W @ v row-major; the faster
    read     np.add.reduce over W flattened (one pass, SIMD; every byte read once)
at 1 BLAS thread and at every usable core, best of --runs each (a shared machine only ever
slows a run down, so the best run is the least disturbed one). GB/s = bytes of W / seconds.

    python bench/bandwidth.py [--mib 512] [--runs 7]

Last line: one JSON object; `bandwidth_gb_s` is the best of all of them.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from glassformer.blas import blas_threads


def best_seconds(run, runs: int) -> float:
    """Fastest of `runs` calls (after one warm-up)."""
    run()
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def stream_bandwidth(mib: int = 512, runs: int = 7) -> dict:
    """GB/s of a float32 matrix-vector product and of a plain read, per thread count."""
    cols = 4096
    rows = mib * 2**20 // (4 * cols)
    rng = np.random.default_rng(0)
    w_rows = rng.standard_normal((rows, cols), dtype=np.float32)        # (R, N), C order
    gigabytes = w_rows.nbytes / 1e9
    v_rows = rng.standard_normal(cols, dtype=np.float32)
    result = {"bytes": w_rows.nbytes}
    thread_counts = sorted({1, len(os.sched_getaffinity(0))})
    for threads in thread_counts:
        with blas_threads(threads):
            row_major = best_seconds(lambda: w_rows @ v_rows, runs)           # (R, N) @ (N,)
            w_cols = w_rows.T                                                  # (N, R), F order
            v_cols = v_rows[: w_cols.shape[0]]
            col_major = best_seconds(lambda: v_cols @ w_cols, runs)           # (N,) @ (N, R)
        result[f"matvec_{threads}t_gb_s"] = round(gigabytes / min(row_major, col_major), 2)
    flat = w_rows.reshape(-1)
    result["read_gb_s"] = round(gigabytes / best_seconds(lambda: np.add.reduce(flat), runs), 2)
    result["bandwidth_gb_s"] = max(value for key, value in result.items() if key.endswith("gb_s"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="size of the streamed matrix")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each, best kept")
    args = parser.parse_args()
    result = stream_bandwidth(args.mib, args.runs)
    for key, value in result.items():
        print(f"{key:24s} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
