"""Block speed: glassformer's attention and MLP blocks (forward + hand-written backward) vs the
same modules in PyTorch (forward + autograd backward), at GPT-2-small width.

    C=768, H=12 (D=64), F=3072, T=256, B=4, float32; causal self-attention with q/k/v/out biases,
    GELU (tanh) MLP with biases, as one GPT-2 layer has them.

The torch modules start from a copy of our weights and see the same x and upstream gradient.
torch runs on as many threads as NumPy's BLAS (read with threadpoolctl when installed, else the
CPU count). Each side is warmed up, then the two alternate run by run so machine noise hits both
alike. The JSON figures are medians over the timed runs; the table adds each side's fastest run,
the one least disturbed when other jobs share the machine.

    python bench/ops.py [--runs 10] [--warmup 2] [--threads N] [--profile]

Last line: one JSON object with attention_* and mlp_* milliseconds and ratios (ours / torch).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import time
from functools import partial

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from glassformer.blocks import (BlockConfig, attention_block_backward, attention_block_forward,
                                init_attention, init_mlp, mlp_backward, mlp_forward)

SIZES = dict(B=4, T=256, C=768, H=12)


def blas_threads(limit: int | None) -> int:
    """How many threads NumPy's BLAS uses (after capping it at `limit`), for torch to match.

    note: on a machine shared with other jobs, multithreaded OpenBLAS can slow down by 10-100x:
    a stacked matmul such as the attention scores (B*H small GEMMs) waits at a thread barrier per
    GEMM whenever a sibling thread is descheduled. `--threads 1` shows the undisturbed compute.
    """
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        if limit is not None:
            raise SystemExit("--threads needs threadpoolctl (pip install threadpoolctl)")
        return os.cpu_count() or 1
    if limit is not None:
        threadpool_limits(limits=limit, user_api="blas")
    counts = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    return max(counts) if counts else (os.cpu_count() or 1)


def torch_linear(w: np.ndarray, b: np.ndarray | None) -> nn.Linear:
    """nn.Linear holding our (in, out) weight as its (out, in) weight."""
    layer = nn.Linear(w.shape[0], w.shape[1], bias=b is not None)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
        if b is not None:
            layer.bias.copy_(torch.from_numpy(b))
    return layer


class TorchAttention(nn.Module):
    def __init__(self, params: dict, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.q = torch_linear(params["wq"], params.get("bq"))
        self.k = torch_linear(params["wk"], params.get("bk"))
        self.v = torch_linear(params["wv"], params.get("bv"))
        self.o = torch_linear(params["wo"], params.get("bo"))

    def forward(self, x):
        b, t, c = x.shape
        heads = [z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                 for z in (self.q(x), self.k(x), self.v(x))]                # 3 x (B, H, T, D)
        out = F.scaled_dot_product_attention(*heads, is_causal=True)          # (B, H, T, D)
        return self.o(out.transpose(1, 2).reshape(b, t, c))                   # (B, T, C)


class TorchMLP(nn.Module):
    def __init__(self, params: dict):
        super().__init__()
        self.up = torch_linear(params["w_up"], params.get("b_up"))
        self.down = torch_linear(params["w_down"], params.get("b_down"))

    def forward(self, x):
        return self.down(F.gelu(self.up(x), approximate="tanh"))


def glassformer_step(forward, backward, x, dy):
    """One forward + backward; returns the time in ms."""
    start = time.perf_counter()
    out, ctx = forward(x)
    backward(dy, ctx)
    return (time.perf_counter() - start) * 1e3


def torch_step(module, x, dy):
    start = time.perf_counter()
    x_t = torch.from_numpy(x).requires_grad_(True)
    module(x_t).backward(torch.from_numpy(dy))
    elapsed = (time.perf_counter() - start) * 1e3
    module.zero_grad(set_to_none=True)
    return elapsed


def make_pairs(rng):
    """{name: (glassformer step, torch step)} for the attention and the MLP block."""
    b, t, c, h = SIZES["B"], SIZES["T"], SIZES["C"], SIZES["H"]
    attn_cfg = BlockConfig(d_model=c, n_head=h)
    mlp_cfg = BlockConfig(d_model=c, n_head=h, mlp="gelu_tanh")
    attn_params = init_attention(attn_cfg, rng, std=0.02, out_std=0.02)
    mlp_params = init_mlp(mlp_cfg, rng, std=0.02, out_std=0.02)
    x = rng.standard_normal((b, t, c)).astype(np.float32)
    dy = rng.standard_normal((b, t, c)).astype(np.float32)
    torch_attn, torch_mlp = TorchAttention(attn_params, h), TorchMLP(mlp_params)

    def attn_forward(inp):
        return attention_block_forward(attn_params, inp, attn_cfg, causal=True)

    def mlp_fwd(inp):
        return mlp_forward(mlp_params, inp, mlp_cfg)

    return {
        "attention": (partial(glassformer_step, attn_forward, attention_block_backward, x, dy),
                      partial(torch_step, torch_attn, x, dy)),
        "mlp": (partial(glassformer_step, mlp_fwd, mlp_backward, x, dy),
                partial(torch_step, torch_mlp, x, dy)),
    }


def bench(pairs, runs: int, warmup: int) -> tuple[dict, dict]:
    """Medians (the JSON result) and {name: (our fastest ms, torch's fastest ms)}."""
    result, fastest = {}, {}
    for name, (ours, theirs) in pairs.items():
        for _ in range(warmup):
            ours()
            theirs()
        ours_ms, theirs_ms = [], []
        for _ in range(runs):          # alternate, so a noisy moment hits both sides
            ours_ms.append(ours())
            theirs_ms.append(theirs())
        result[f"{name}_glassformer_ms"] = round(statistics.median(ours_ms), 2)
        result[f"{name}_torch_ms"] = round(statistics.median(theirs_ms), 2)
        result[f"{name}_ratio"] = round(statistics.median(ours_ms) / statistics.median(theirs_ms),
                                        2)
        # the fastest run of each side: on a shared machine, the run least disturbed by others
        fastest[name] = (min(ours_ms), min(theirs_ms))
    return result, fastest


def profile(pairs, runs: int) -> None:
    """cProfile of our side only: where the forward + backward time goes."""
    for name, (ours, _) in pairs.items():
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(runs):
            ours()
        profiler.disable()
        print(f"\n== cProfile: glassformer {name} block, {runs} runs ==")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per side (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per side first")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights, x and dy")
    parser.add_argument("--threads", type=int, default=None,
                        help="cap NumPy's BLAS at this many threads, and torch likewise "
                             "(default: NumPy's own count)")
    parser.add_argument("--profile", action="store_true",
                        help="also print a cProfile of glassformer's side")
    args = parser.parse_args(argv)

    threads = blas_threads(args.threads)
    torch.set_num_threads(threads)
    pairs = make_pairs(np.random.default_rng(args.seed))
    result, fastest = bench(pairs, args.runs, args.warmup)
    sizes = ", ".join(f"{k}={v}" for k, v in SIZES.items())
    print(f"forward + backward, float32, {sizes}, {threads} threads, {args.runs} runs")
    print(f"{'block':<10} {'median ms: ours':>16} {'torch':>8} {'ratio':>6}   "
          f"{'fastest ms: ours':>17} {'torch':>8} {'ratio':>6}")
    for name in pairs:
        ours_min, torch_min = fastest[name]
        print(f"{name:<10} {result[name + '_glassformer_ms']:>16.1f} "
              f"{result[name + '_torch_ms']:>8.1f} {result[name + '_ratio']:>6.2f}   "
              f"{ours_min:>17.1f} {torch_min:>8.1f} {ours_min / torch_min:>6.2f}")
    if args.profile:
        profile(pairs, args.runs)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
