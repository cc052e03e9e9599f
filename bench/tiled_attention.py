"""Causal attention alone at long lengths: the whole op (ops/attention.py), the tiled op
(ops/tiled_attention.py) and torch's scaled_dot_product_attention, side by side.

    python bench/tiled_attention.py [--lengths 512 1024 4096 8192] [--repeats 2] [--threads 1]
                                    [--batch 1] [--heads 9] [--kv-heads 3] [--head-dim 64]
                                    [--whole-train-max 4096]

SmolLM2-135M's attention shape by default (9 query heads, 3 key/value heads, D 64), float32.
Per length: the forward as prefill runs it (no weights kept), forward + backward as training runs
it, each side's CPU time (process_time, best of --repeats: a busy machine disturbs it less than
wall time) and, for the two NumPy sides, the peak of NumPy's allocations during training
(tracemalloc; torch's allocator is not traced). weights_mib is the size of one (B, H, T, S)
float32 array, for scale. torch gets (B, H, T, D) tensors (3-D ones send it to a slow path).
Ratios are against the whole op and against torch.
Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from contextlib import nullcontext

import numpy as np

from glassformer.blas import blas_threads
from glassformer.ops.attention import attention_backward, attention_forward
from glassformer.ops.tiled_attention import tiled_attention_backward, tiled_attention_forward


def best_cpu(run, repeats: int) -> float:
    """Least CPU seconds of `repeats` calls (after one warm-up)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def peak_mib(run) -> float:
    """Peak traced allocation (MiB) while `run` runs: NumPy reports its buffers to tracemalloc."""
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def sides(q, k, v, dout, torch):
    """{side: (forward, forward + backward)} as zero-argument callables."""
    def whole_fwd():
        attention_forward(q, k, v, causal=True, keep_weights=False)

    def whole_train():
        attention_backward(dout, attention_forward(q, k, v, causal=True)[1])

    def tiled_fwd():
        tiled_attention_forward(q, k, v, causal=True)

    def tiled_train():
        tiled_attention_backward(dout, tiled_attention_forward(q, k, v, causal=True)[1])

    tq, tk, tv, tdout = (torch.from_numpy(np.ascontiguousarray(a))       # (B, H or K, T, D)
                         for a in (q.reshape(q.shape[0], -1, *q.shape[-2:]),
                                   k[:, :, 0], v[:, :, 0],
                                   dout.reshape(dout.shape[0], -1, *dout.shape[-2:])))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_fwd():
        with torch.no_grad():
            sdpa(tq, tk, tv, is_causal=True, enable_gqa=True)

    def torch_train():
        qq = tq.clone().requires_grad_()
        kk = tk.clone().requires_grad_()
        vv = tv.clone().requires_grad_()
        sdpa(qq, kk, vv, is_causal=True, enable_gqa=True).backward(tdout)

    return {"whole": (whole_fwd, whole_train), "tiled": (tiled_fwd, tiled_train),
            "torch": (torch_fwd, torch_train)}


def one_length(torch, t: int, args) -> dict:
    rng = np.random.default_rng(t)
    b, kv, g, d = args.batch, args.kv_heads, args.heads // args.kv_heads, args.head_dim
    q = rng.standard_normal((b, kv, g, t, d)).astype(np.float32)       # (B, K, G, T, D)
    k = rng.standard_normal((b, kv, 1, t, d)).astype(np.float32)       # (B, K, 1, S, D)
    v = rng.standard_normal((b, kv, 1, t, d)).astype(np.float32)
    dout = rng.standard_normal(q.shape).astype(np.float32)
    row = {}
    for side, (fwd, train) in sides(q, k, v, dout, torch).items():
        row[f"{side}_forward_cpu_s"] = round(best_cpu(fwd, args.repeats), 4)
        if side == "whole" and t > args.whole_train_max:
            continue                          # its (T, S) arrays would not fit beside the rest
        row[f"{side}_train_cpu_s"] = round(best_cpu(train, args.repeats), 4)
        if side != "torch":
            row[f"{side}_train_peak_mib"] = round(peak_mib(train), 1)
    for kind in ("forward", "train"):
        tiled = row[f"tiled_{kind}_cpu_s"]
        if f"whole_{kind}_cpu_s" in row:
            row[f"{kind}_tiled_vs_whole"] = round(tiled / row[f"whole_{kind}_cpu_s"], 3)
        row[f"{kind}_tiled_vs_torch"] = round(tiled / row[f"torch_{kind}_cpu_s"], 3)
    row["weights_mib"] = round(b * args.heads * t * t * 4 / 2**20, 1)   # one (B, H, T, S)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 4096, 8192],
                        help="sequence lengths T = S (default 512 1024 4096 8192)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per side")
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads")
    parser.add_argument("--whole-train-max", type=int, default=4096,
                        help="longest T for the whole op's training pass (it keeps ~3 (B, H, T, "
                             "S) float32 arrays: 7 GiB at 8,192)")
    parser.add_argument("--batch", type=int, default=1, help="B")
    parser.add_argument("--heads", type=int, default=9, help="query heads H")
    parser.add_argument("--kv-heads", type=int, default=3, help="key/value heads K")
    parser.add_argument("--head-dim", type=int, default=64, help="D")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    limit = blas_threads(args.threads) if args.threads else nullcontext()
    result = {"threads": args.threads, "shape": [args.batch, args.heads, args.kv_heads,
                                                 args.head_dim]}
    with limit:
        for t in args.lengths:
            result[f"T{t}"] = one_length(torch, t, args)
            print(f"T={t}", result[f"T{t}"], flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
