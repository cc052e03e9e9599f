"""Training speed: glassformer's hand-written backprop vs PyTorch autograd, same model and recipe.

nanoGPT's Shakespeare-char CPU recipe (L=4, H=4, C=128, T=64, B=12, AdamW lr 1e-3, betas
0.9/0.99, wd 0.1, clip 1.0, no biases, no dropout). The torch model (torchref/gpt.py) starts from a
copy of our weights and sees the same batches. Both run in this process, alternating blocks of
iterations so machine noise hits both alike; each figure is the median ms per iteration. Peak RSS
is measured in two child processes that each run one side only.

Both sides use every core, each its own way, as `glassformer train` and nanoGPT do: torch splits
each op over its intra-op threads; glassformer trains one batch shard per core, shard 0 here and
the others in worker processes (train/parallel.py, `--workers`). The one-worker figure
(`--workers 1`: plain single-process NumPy, BLAS on every core) is printed too. glassformer's peak
RSS is the sum over its processes (pages they share count in each).

    python -m bench.train_vs_torch [--iters 100] [--data ../shared/data/tinyshakespeare.txt]

(from the repository root, as a module: the torch side imports torchref/, which sits there.)

Last line: one JSON object with glassformer_ms_per_iter, torch_ms_per_iter, ratio, peak RSS,
workers, and the same figures for one worker.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

from glassformer.allocator import keep_freed_memory
from glassformer.blas import blas_threads
from glassformer.models import gpt2
from glassformer.train.optim import adamw_init
from glassformer.train.parallel import (parallel_train_step, parallel_workers, resolve_workers,
                                        share_run_arrays, usable_cores)
from glassformer.train.workers import peak_rss_mib as worker_peak_rss_mib

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
RECIPE = dict(lr=1e-3, beta1=0.9, beta2=0.99, weight_decay=0.1, grad_clip=1.0, batch=12,
              block=64)


def load_ids(path: Path) -> tuple[np.ndarray, int]:
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        chars = sorted(set(text))
        lookup = {ch: i for i, ch in enumerate(chars)}
        return np.array([lookup[ch] for ch in text], dtype=np.int64), len(chars)
    print(f"note: {path} not found; using random ids", file=sys.stderr)
    return np.random.default_rng(0).integers(0, 65, 200_000), 65


def batches(ids: np.ndarray, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    t, b = RECIPE["block"], RECIPE["batch"]
    for _ in range(n):
        starts = rng.integers(0, len(ids) - t - 1, size=b)
        rows = starts[:, None] + np.arange(t)[None, :]
        yield ids[rows], ids[rows + 1]


def glassformer_stepper(cfg, params, workers: int):
    """One training step as `glassformer train` runs it, with `workers` shards.

    Returns (step(x, y, procs), start_workers()): shards 1.. run in the worker processes
    `start_workers()` starts (a context manager yielding `procs`).
    """
    opt = adamw_init(params)
    if workers > 1:
        params, opt = share_run_arrays(params, opt)
    state = {"opt": opt}

    def step(x, y, procs=None):
        loss, state["opt"] = parallel_train_step(
            gpt2, params, cfg, [(x, y)], state["opt"], rng=None, workers=workers, procs=procs,
            grad_clip=RECIPE["grad_clip"], lr=RECIPE["lr"], beta1=RECIPE["beta1"],
            beta2=RECIPE["beta2"], weight_decay=RECIPE["weight_decay"])
        return loss

    def start_workers():
        return parallel_workers(gpt2, cfg, params, state["opt"], workers=workers,
                                batch_size=RECIPE["batch"], block_size=RECIPE["block"])
    return step, start_workers


def torch_stepper(cfg, params):
    import torch
    from torchref import gpt as torch_gpt

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    model = torch_gpt.build(cfg, params)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": RECIPE["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=RECIPE["lr"],
                            betas=(RECIPE["beta1"], RECIPE["beta2"]))

    def step(x, y):
        _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE["grad_clip"])
        opt.step()
        return loss.item()
    return step


def model_and_params(vocab: int):
    cfg = gpt2.GPT2Config(vocab_size=vocab, max_seq_len=RECIPE["block"], n_layer=4, n_head=4,
                          d_model=128, bias=False, dropout=0.0)
    return cfg, gpt2.init_params(cfg, np.random.default_rng(1337))


def peak_rss_mib() -> float:
    """VmHWM of this process (ru_maxrss would include the parent's high-water mark)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def timed(step, data) -> list[float]:
    out = []
    for x, y in data:
        start = time.perf_counter()
        step(x, y)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def one_core(step, data) -> list[float]:
    """`timed` for the one-worker side: plain NumPy, its BLAS on every core (workers idle)."""
    with blas_threads(usable_cores()):
        return timed(step, data)


def child(side: str, iters: int, data_path: Path) -> None:
    """Run one side only and print its peak RSS (MiB) and ms/iter as JSON."""
    ids, vocab = load_ids(data_path)
    cfg, params = model_and_params(vocab)
    workers_rss = 0.0
    if side == "glassformer":
        step, start_workers = glassformer_stepper(cfg, params, resolve_workers(0, RECIPE["batch"]))
        with start_workers() as procs:
            ms = timed(partial(step, procs=procs), batches(ids, iters))
            workers_rss = worker_peak_rss_mib(procs)
    else:
        ms = timed(torch_stepper(cfg, params), batches(ids, iters))
    rss_mib = peak_rss_mib() + workers_rss
    print(json.dumps({"side": side, "peak_rss_mib": rss_mib, "ms": statistics.median(ms)}))


def main() -> None:
    keep_freed_memory()  # as the glassformer CLI does; torch's allocator benefits the same way
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100, help="timed iterations per side")
    parser.add_argument("--block", type=int, default=10, help="iterations per alternating block")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="corpus (char-level)")
    parser.add_argument("--child", choices=["glassformer", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.iters, args.data)
        return
    ids, vocab = load_ids(args.data)
    cfg, params = model_and_params(vocab)
    workers = resolve_workers(0, RECIPE["batch"])
    torch_step = torch_stepper(cfg, {k: v.copy() for k, v in params.items()})
    one_core_params = {k: v.copy() for k, v in params.items()}
    ours_ms, one_ms, torch_ms = [], [], []
    data = list(batches(ids, args.iters + 10))
    ours_step, start_workers = glassformer_stepper(cfg, params, workers)
    one_step, _ = glassformer_stepper(cfg, one_core_params, 1)
    # One set of worker processes for the whole run, as `glassformer train` has: they wait on
    # their pipes (no CPU) while the other sides run. Starting them afresh for every block
    # made each block's first step ~20 ms slower (new processes, cold memory), which no
    # training run pays.
    with start_workers() as procs:  # holds BLAS at one thread per process
        ours = partial(ours_step, procs=procs)
        timed(ours, data[:5]), one_core(one_step, data[:5]), timed(torch_step, data[:5])
        for start in range(10, len(data), args.block):
            chunk = data[start:start + args.block]
            ours_ms += timed(ours, chunk)
            one_ms += one_core(one_step, chunk)
            torch_ms += timed(torch_step, chunk)
    rss = {}
    for side in ("glassformer", "torch"):
        done = subprocess.run([sys.executable, "-m", "bench.train_vs_torch", "--child", side,
                               "--iters", "20", "--data", str(args.data)], cwd=ROOT,
                              capture_output=True, text=True, check=True)
        rss[side] = json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mib"]
    ours, one, theirs = (statistics.median(ms) for ms in (ours_ms, one_ms, torch_ms))
    print(f"glassformer  {ours:8.2f} ms/iter   peak RSS {rss['glassformer']:7.1f} MiB   "
          f"({workers} workers)")
    print(f"  1 worker   {one:8.2f} ms/iter")
    print(f"torch        {theirs:8.2f} ms/iter   peak RSS {rss['torch']:7.1f} MiB")
    print(f"ratio (glassformer / torch ms per iter): {ours / theirs:.3f}  "
          f"(1 worker: {one / theirs:.3f})")
    print(json.dumps({"glassformer_ms_per_iter": round(ours, 3), "torch_ms_per_iter": round(theirs, 3),
                      "ratio": round(ours / theirs, 4), "workers": workers,
                      "one_worker_ms_per_iter": round(one, 3),
                      "one_worker_ratio": round(one / theirs, 4),
                      "glassformer_peak_rss_mib": round(rss["glassformer"], 1),
                      "torch_peak_rss_mib": round(rss["torch"], 1)}))


if __name__ == "__main__":
    main()
