"""MoE block speed: glassformer's sparse mixture-of-experts MLP (forward + hand-written backward)
vs transformers' Qwen3MoeSparseMoeBlock (forward + autograd backward) on the same weights.

    B=8, T=128, C=256, E=8 experts, k=2 per token, F_e=256, softmax top-k renormalised, float32

The torch block is HF's own module (torchref/moe.py loads our weights into it), run with both of
its experts implementations: "eager", a loop over the experts with index_add_ (the same plan as
ours: one product per expert), and "grouped_mm", one grouped kernel over all experts. torch
runs on as many threads as NumPy's BLAS. Each side is warmed up, then the sides alternate run by
run so machine noise hits all alike; the JSON figures are medians over the timed runs.

    python -m bench.moe_block [--runs 10] [--warmup 2] [--threads N]

Last line: one JSON object with each side's milliseconds and the ratios ours / torch.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial

import numpy as np
import torch

from bench.ops import blas_threads
from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.blocks.moe import init_moe, moe_backward, moe_forward
from torchref import moe as torch_moe

SIZES = dict(B=8, T=128, C=256, E=8, K=2, F=256)
IMPLEMENTATIONS = ("eager", "grouped_mm")


def make_inputs(rng: np.random.Generator):
    """(cfg, params, x, dy) at SIZES, float32, weights at 1/sqrt(fan-in)."""
    moe = MoEConfig(n_experts=SIZES["E"], experts_per_token=SIZES["K"], expert_d_ff=SIZES["F"],
                    norm_topk_prob=True)
    cfg = BlockConfig(d_model=SIZES["C"], n_head=1, norm="rms", mlp="swiglu", mlp_bias=False,
                      moe=moe)
    std = 1.0 / SIZES["C"] ** 0.5
    params = init_moe(cfg, rng, std=std, out_std=1.0 / SIZES["F"] ** 0.5)
    x = rng.standard_normal((SIZES["B"], SIZES["T"], SIZES["C"])).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    return cfg, params, x, dy


def ours_step(cfg, params, x, dy) -> None:
    y, ctx = moe_forward(params, x, cfg)
    moe_backward(dy, ctx)


def torch_step(block, x, dy) -> None:
    block.zero_grad(set_to_none=True)
    x_t = torch.from_numpy(x).requires_grad_(True)
    block(x_t).backward(torch.from_numpy(dy))


def bench(runs: int, warmup: int) -> dict[str, list[float]]:
    cfg, params, x, dy = make_inputs(np.random.default_rng(0))
    steps = {"glassformer": partial(ours_step, cfg, params, x, dy)}
    for name in IMPLEMENTATIONS:
        block = torch_moe.hf_block("qwen3_moe", cfg.moe, cfg.d_model, experts=name)
        torch_moe.load(block, params)
        steps[f"torch_{name}"] = partial(torch_step, block, x, dy)
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(runs):       # alternate, so noise hits every side alike
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - start) * 1000.0)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per side first")
    parser.add_argument("--threads", type=int, default=None, help="cap BLAS (and torch) threads")
    args = parser.parse_args(argv)
    threads = blas_threads(args.threads)
    torch.set_num_threads(threads)
    times = bench(args.runs, args.warmup)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"MoE block fwd+bwd, {SIZES}, {threads} threads, {args.runs} runs")
    print(f"{'side':<22}{'median ms':>12}{'best ms':>10}")
    for name, values in times.items():
        print(f"{name:<22}{medians[name]:>12.2f}{min(values):>10.2f}")
    result = {"sizes": SIZES, "threads": threads, "runs": args.runs,
              **{f"{name}_ms": round(ms, 3) for name, ms in medians.items()}}
    for name in IMPLEMENTATIONS:
        result[f"ratio_vs_torch_{name}"] = round(medians["glassformer"] /
                                                 medians[f"torch_{name}"], 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
