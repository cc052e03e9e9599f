"""GELU cost: the exact (erf) GELU on float32 against the tanh approximation, forward + backward.

Three variants on the same float32 activations, each a training step's forward (keeping the
slope) and backward:
    tanh        gelu_forward(x, approximate="tanh"): GPT-2's approximation, the yardstick
    exact       gelu_forward(x, approximate="none"): float32, Mills' ratio (ops/_erf.py)
    exact_old   the float32 path before issue 33: Cody's erfc in float64, cast back (below)
and torch's F.gelu (erf, float32, autograd) when torch is installed. They alternate run by run, so
load on a shared machine hits all alike; the figures are each variant's fastest run and the
median, and the ratios divide by tanh's. It also prints the exact GELU's error against
0.5 x erfc(-x / sqrt 2) in float64 on a dense grid over [-12, 12].

    python bench/gelu.py [--rows 1024] [--width 512] [--runs 40]

The default shape is the BERT recipe's MLP activation (B*T = 32*32 rows, F = 512). Last line:
one JSON object with milliseconds, ratios (exact / tanh, exact / exact_old) and the error table.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np

from glassformer.allocator import keep_freed_memory
from glassformer.blas import blas_threads
from glassformer.ops import activation
from glassformer.ops._erf import erfc
from glassformer.ops.activation import gelu_backward, gelu_forward

REL_FLOOR = 1e-6          # the split: relative error where |GELU| >= this, absolute below


def old_exact(x: np.ndarray, dout: np.ndarray) -> np.ndarray:
    """The float32 exact GELU as it was before (float64 Cody erfc, cast back), forward + backward."""
    gate = activation._normal_cdf(x)
    slope = x * x
    slope *= -0.5
    np.exp(slope, out=slope)
    slope *= 1.0 / math.sqrt(2.0 * math.pi)
    slope *= x
    slope += gate
    out = np.multiply(x, gate, out=gate)
    return out, dout * slope


def ours(approximate: str, x: np.ndarray, dout: np.ndarray):
    out, ctx = gelu_forward(x, approximate=approximate)
    return out, gelu_backward(dout, ctx)


def torch_variant(x: np.ndarray, dout: np.ndarray):
    """torch's float32 erf GELU with autograd, or None when torch is absent."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    x_t = torch.from_numpy(x)
    dout_t = torch.from_numpy(dout)

    def run():
        leaf = x_t.detach().requires_grad_()
        out = torch.nn.functional.gelu(leaf)
        out.backward(dout_t)
        return out, leaf.grad
    return run


def error_table() -> dict:
    """Exact GELU (float32) against float64 0.5 x erfc(-x / sqrt 2) on 2.4M points of [-12, 12]."""
    x = np.linspace(-12.0, 12.0, 2_400_001).astype(np.float32)
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * erfc(-x64 / math.sqrt(2.0))
    rows = {}
    for name, got in (("exact", gelu_forward(x)[0]), ("exact_old", old_exact(x, x)[0])):
        err = np.abs(got.astype(np.float64) - want)
        big = np.abs(want) >= REL_FLOOR
        rows[name] = {"max_rel_err_where_ge_1e-6": float((err[big] / np.abs(want[big])).max()),
                      "max_abs_err_below_1e-6": float(err[~big].max())}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024, help="rows of activations (B*T)")
    parser.add_argument("--width", type=int, default=512, help="activation width (F)")
    parser.add_argument("--runs", type=int, default=40, help="timed runs per variant")
    args = parser.parse_args()
    keep_freed_memory()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.width)).astype(np.float32)
    dout = rng.standard_normal(x.shape).astype(np.float32)
    variants = {"tanh": lambda: ours("tanh", x, dout), "exact": lambda: ours("none", x, dout),
                "exact_old": lambda: old_exact(x, dout)}
    torch_run = torch_variant(x, dout)
    if torch_run is not None:
        variants["torch_erf"] = torch_run
    times = {name: [] for name in variants}
    with blas_threads(1):
        for name, fn in variants.items():          # warm-up
            fn()
        for _ in range(args.runs):
            for name, fn in variants.items():
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
    best = {name: min(t) for name, t in times.items()}
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"GELU forward + backward on float32 ({args.rows}, {args.width}), {args.runs} runs each")
    print(f"{'variant':<11} {'best ms':>8} {'median ms':>10} {'best / tanh':>12}")
    for name in variants:
        print(f"{name:<11} {best[name]:8.3f} {median[name]:10.3f} {best[name] / best['tanh']:12.2f}")
    errors = error_table()
    for name, row in errors.items():
        print(f"{name}: max relative error {row['max_rel_err_where_ge_1e-6']:.2e} where |GELU| >= "
              f"1e-6, max absolute error {row['max_abs_err_below_1e-6']:.2e} below")
    result = {"shape": [args.rows, args.width], "best_ms": best, "median_ms": median,
              "exact_over_tanh": best["exact"] / best["tanh"],
              "exact_over_tanh_median": median["exact"] / median["tanh"],
              "exact_over_exact_old": best["exact"] / best["exact_old"], "errors": errors}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
