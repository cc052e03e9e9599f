"""Training speed: glassformer's hand-written backprop vs PyTorch autograd, same model and recipe.

nanoGPT's Shakespeare-char CPU recipe (L=4, H=4, C=128, T=64, B=12, AdamW lr 1e-3, betas
0.9/0.99, wd 0.1, clip 1.0, no biases, no dropout). The torch model (torchref/gpt.py) starts from a
copy of our weights and sees the same batches. Both sides use every core, each its own way, as `glassformer train` and nanoGPT do: torch splits
each op over its intra-op threads; glassformer trains one batch shard per core, one MPI rank each
(train/distributed.py, `--workers`). The bench starts itself under mpiexec with that many ranks;
rank 0 also runs the torch side, alternating blocks of iterations, while the other ranks wait
asleep (not spinning on a core torch needs). The one-rank figure (`--workers 1`: plain
single-process NumPy, BLAS on every core) is printed too. Peak RSS is measured in separate runs
that each run one side only; glassformer's is the sum over its ranks.

    python -m bench.train_vs_torch [--iters 100] [--data ../shared/data/tinyshakespeare.txt]

(from the repository root, as a module: the torch side imports torchref/, which sits there.)

Last line: one JSON object with glassformer_ms_per_iter, torch_ms_per_iter, ratio, peak RSS,
workers, and the same figures for one rank.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from glassformer.allocator import keep_freed_memory
from glassformer.blas import blas_threads
from glassformer.cli.launch import ROOT_VARIABLES, mpiexec_path
from glassformer.models import gpt2
from glassformer.train.distributed import (data_parallel_step, default_workers, mpi_comm,
                                           threads_per_rank, usable_cores)
from glassformer.train.optim import adamw_init
from glassformer.train.step import train_step

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


def glassformer_stepper(cfg, params, comm=None):
    """One training step as `glassformer train` runs it: over the ranks of `comm`, or (None)
    in this process alone."""
    state = {"opt": adamw_init(params)}
    hyper = dict(grad_clip=RECIPE["grad_clip"], lr=RECIPE["lr"], beta1=RECIPE["beta1"],
                 beta2=RECIPE["beta2"], weight_decay=RECIPE["weight_decay"])

    def step(x, y):
        if comm is None:
            loss, state["opt"], _ = train_step(gpt2, params, cfg, [(x, y)], state["opt"], rng=None,
                                            **hyper)
        else:
            loss, state["opt"], _ = data_parallel_step(comm, gpt2, params, cfg, [(x, y)],
                                                       state["opt"], rng=None, **hyper)
        return loss
    return step


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
    """`timed` for the one-rank side: plain NumPy, its BLAS on every core (other ranks idle)."""
    with blas_threads(usable_cores()):
        return timed(step, data)


def wait_asleep(comm) -> None:
    """Block until rank 0 reaches its matching `release`, sleeping rather than spinning (MPI's
    blocking calls poll, which would take a core from torch)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)


def release(comm) -> None:
    comm.Ibarrier().Wait()


def compare(comm, args) -> None:
    """The side-by-side run on every rank; rank 0 prints its medians as JSON."""
    ids, vocab = load_ids(args.data)
    cfg, params = model_and_params(vocab)
    data = list(batches(ids, args.iters + 10))
    ours = glassformer_stepper(cfg, params, comm)
    rank0 = comm.Get_rank() == 0
    if rank0:
        torch_step = torch_stepper(cfg, {k: v.copy() for k, v in params.items()})
        one_step = glassformer_stepper(cfg, {k: v.copy() for k, v in params.items()})
    ours_ms, one_ms, torch_ms = [], [], []
    with blas_threads(threads_per_rank(comm)):
        for start in range(0, len(data), args.block):
            chunk = data[start:start + args.block]
            ms = timed(ours, chunk)
            if not rank0:
                wait_asleep(comm)
                continue
            others = one_core(one_step, chunk), timed(torch_step, chunk)
            release(comm)
            if start >= 10:  # the first block warms up
                ours_ms, one_ms, torch_ms = ours_ms + ms, one_ms + others[0], torch_ms + others[1]
    if rank0:
        print(json.dumps({"ours": statistics.median(ours_ms), "one": statistics.median(one_ms),
                          "torch": statistics.median(torch_ms)}))


def child(comm, side: str, iters: int, data_path: Path) -> None:
    """Run one side only and print its peak RSS (MiB; glassformer: summed over ranks)."""
    ids, vocab = load_ids(data_path)
    cfg, params = model_and_params(vocab)
    if side == "glassformer":
        with blas_threads(threads_per_rank(comm)):
            timed(glassformer_stepper(cfg, params, comm), batches(ids, iters))
        total = sum(comm.allgather(peak_rss_mib()))
        if comm.Get_rank() == 0:
            print(json.dumps({"side": side, "peak_rss_mib": total}))
        return
    timed(torch_stepper(cfg, params), batches(ids, iters))
    print(json.dumps({"side": side, "peak_rss_mib": peak_rss_mib()}))


def under_mpiexec(workers: int, flags: list[str]) -> str:
    """Run this bench as `workers` ranks; returns rank 0's last stdout line."""
    command = [mpiexec_path(), "-n", str(workers), "--bind-to", "none", sys.executable, "-m",
               "bench.train_vs_torch", *flags]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **ROOT_VARIABLES})
    if done.returncode != 0:
        sys.exit(f"mpiexec failed: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    keep_freed_memory()  # as the glassformer CLI does; torch's allocator benefits the same way
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100, help="timed iterations per side")
    parser.add_argument("--block", type=int, default=10, help="iterations per alternating block")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="corpus (char-level)")
    parser.add_argument("--child", choices=["glassformer", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    comm = mpi_comm()
    if comm is not None:  # one of the ranks this bench started
        if args.child:
            child(comm, args.child, args.iters, args.data)
        else:
            compare(comm, args)
        return
    if args.child == "torch":
        child(None, "torch", args.iters, args.data)
        return
    workers = default_workers(RECIPE["batch"])
    flags = ["--iters", str(args.iters), "--block", str(args.block), "--data", str(args.data)]
    ms = json.loads(under_mpiexec(workers, flags))
    rss = {"glassformer": json.loads(under_mpiexec(workers, ["--child", "glassformer", "--iters",
                                                             "20", "--data", str(args.data)]))}
    done = subprocess.run([sys.executable, "-m", "bench.train_vs_torch", "--child", "torch",
                           "--iters", "20", "--data", str(args.data)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    rss["torch"] = json.loads(done.stdout.strip().splitlines()[-1])
    rss = {side: record["peak_rss_mib"] for side, record in rss.items()}
    ours, one, theirs = ms["ours"], ms["one"], ms["torch"]
    print(f"glassformer  {ours:8.2f} ms/iter   peak RSS {rss['glassformer']:7.1f} MiB   "
          f"({workers} MPI ranks)")
    print(f"  1 rank     {one:8.2f} ms/iter")
    print(f"torch        {theirs:8.2f} ms/iter   peak RSS {rss['torch']:7.1f} MiB")
    print(f"ratio (glassformer / torch ms per iter): {ours / theirs:.3f}  "
          f"(1 rank: {one / theirs:.3f})")
    print(json.dumps({"glassformer_ms_per_iter": round(ours, 3), "torch_ms_per_iter": round(theirs, 3),
                      "ratio": round(ours / theirs, 4), "workers": workers,
                      "one_worker_ms_per_iter": round(one, 3),
                      "one_worker_ratio": round(one / theirs, 4),
                      "glassformer_peak_rss_mib": round(rss["glassformer"], 1),
                      "torch_peak_rss_mib": round(rss["torch"], 1)}))


if __name__ == "__main__":
    main()
