"""Causal attention of a long prefill alone: the compiled path (kernels/prefill.py), its NumPy twin
(ops/tiled_attention.py) and torch's fused kernel, same inputs, same run.

    python bench/prefill_attention.py [--lengths 1024 4096 8192] [--repeats 3] [--threads 1]

SmolLM2-135M's attention shape (9 query heads sharing 3 KV heads, 64 dims per head), float32,
random q, k, v of T positions, one layer. torch's side is
torch.nn.functional.scaled_dot_product_attention(is_causal=True, enable_gqa=True) (K/V not
repeated, as ours). Each side's wall and CPU seconds (process_time, which a busy machine
disturbs less than wall time), the best of --repeats after one warm-up, the three sides
alternated run by run; ratios against torch; the largest difference of our two paths' outputs.
--threads N: BLAS's, numba's and torch's threads (the compiled path spreads its query tiles
over numba's count: kernels/spread.py). Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from glassformer.blas import blas_threads
from glassformer.kernels.choice import prefill_kernels
from glassformer.ops.tiled_attention import tiled_attention_forward

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.prefill import timed     # noqa: E402  (run as a script)

N_KV, GROUP, HEAD_DIM = 3, 3, 64


def one_length(torch, fast, t: int, repeats: int) -> dict:
    rng = np.random.default_rng(t)
    q = rng.standard_normal((1, N_KV, GROUP, t, HEAD_DIM), dtype=np.float32)
    k = rng.standard_normal((1, N_KV, 1, t, HEAD_DIM), dtype=np.float32)
    v = rng.standard_normal((1, N_KV, 1, t, HEAD_DIM), dtype=np.float32)
    tq = torch.from_numpy(q.reshape(1, N_KV * GROUP, t, HEAD_DIM))
    tk, tv = torch.from_numpy(k[:, :, 0]), torch.from_numpy(v[:, :, 0])
    ours = fast.tiled_attention_forward(q, k, v, causal=True)[0]
    twin = tiled_attention_forward(q, k, v, causal=True)[0]
    sides = {"compiled": lambda: fast.tiled_attention_forward(q, k, v, causal=True),
             "numpy_twin": lambda: tiled_attention_forward(q, k, v, causal=True),
             "torch_sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(
                 tq, tk, tv, is_causal=True, enable_gqa=True)}
    for run in sides.values():                           # one warm-up each
        run()
    times = {name: [] for name in sides}
    for _ in range(repeats):                             # the three sides alternated
        for name, run in sides.items():
            times[name].append(timed(run))
    row = {}
    for name, runs in times.items():
        row[f"{name}_wall_s"] = min(wall for wall, _ in runs)
        row[f"{name}_cpu_s"] = min(cpu for _, cpu in runs)
    row = {name: round(value, 4) for name, value in row.items()}
    row["max_abs_difference"] = float(np.abs(ours - twin).max())
    for kind in ("wall", "cpu"):
        for name in ("compiled", "numpy"):
            mine = row[f"{name}_{kind}_s" if name == "compiled" else f"numpy_twin_{kind}_s"]
            row[f"{name}_over_torch_{kind}"] = round(mine / row[f"torch_sdpa_{kind}_s"], 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    fast = prefill_kernels("numba")
    start = time.process_time()
    fast.tiled_attention_forward(*(np.zeros((1, 1, 1, 4, 2), np.float32),) * 3, causal=True)
    result = {"threads": args.threads, "first_call_cpu_s": round(time.process_time() - start, 3)}
    with blas_threads(args.threads):
        for t in args.lengths:
            result[str(t)] = one_length(torch, fast, t, args.repeats)
            print(f"T={t}: {result[str(t)]}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
