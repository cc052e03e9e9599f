"""Training steps on the compiled kernels against the NumPy path, alternating in one process.

Two steps, each run on both paths (GLASSFORMER_KERNELS=numpy, then numba, in turn, each path
with its own copy of the params and AdamW state), one BLAS thread, CPU time per step:

    shard   one rank's shard of the Shakespeare recipe (bench/train_vs_torch.py's model and
            batches, 6 of its 12 rows: what each of `glassformer train`'s two ranks runs)
    lora    one LoRA step on SmolLM2-135M (bench/finetune.py's batch, r 8 on q_proj and v_proj,
            the model dequantized to float32), with --lora

On a busy machine CPU time is steadier than wall time, and alternating blocks of steps lets the
machine's drift fall on both paths alike; the ratio is the figure to read.

    python -m bench.train_kernels [--rounds 8] [--block 10] [--lora] [--lora-rounds 4]

(from the repository root, as a module.) Last line: one JSON object with each step's medians
(ms) and the ratio numba / numpy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from glassformer.allocator import keep_freed_memory
from glassformer.blas import blas_threads
from glassformer.kernels.choice import KERNELS_ENV

PATHS = ("numpy", "numba")


def alternate(steps: dict, rounds: int, block: int) -> dict:
    """steps[path]() runs one step; returns each path's CPU ms per step, the first round (the
    warm-up and the kernels' compile or cache load) left out."""
    times = {path: [] for path in PATHS}
    for index in range(rounds):
        for path in PATHS:
            os.environ[KERNELS_ENV] = path
            for _ in range(block):
                start = time.process_time()
                steps[path]()
                if index > 0:
                    times[path].append((time.process_time() - start) * 1e3)
    return times


def shard_steps(rows: int = 6):
    from bench.train_vs_torch import (DEFAULT_DATA, batches, glassformer_stepper, load_ids,
                                      model_and_params)
    ids, vocab = load_ids(DEFAULT_DATA)
    cfg, params = model_and_params(vocab)
    data = [(x[:rows], y[:rows]) for x, y in batches(ids, 200)]
    steps = {}
    for path in PATHS:
        stepper = glassformer_stepper(cfg, {k: v.copy() for k, v in params.items()})
        cursor = iter(range(10**9))
        steps[path] = (lambda stepper=stepper, cursor=cursor:
                       stepper(*data[next(cursor) % len(data)]))
    return steps


def lora_steps():
    from bench.finetune import ALPHA, LR, R, TARGETS, batch
    from glassformer.io.named_models import load_model
    from glassformer.io.peft import LoraConfig, adapter_constants, init_adapters
    from glassformer.train.objectives.sft import SFT
    from glassformer.train.optim import adamw_init
    from glassformer.train.step import train_step
    model = load_model("smollm2", dequantize=True)
    x, y = batch(model)
    lora_cfg = LoraConfig(r=R, alpha=ALPHA, targets=TARGETS)
    steps = {}
    for path in PATHS:
        adapters = init_adapters(model, lora_cfg, np.random.default_rng(0))
        state = {"opt": adamw_init(adapters)}
        frozen = {**model.params, **adapter_constants(adapters, lora_cfg)}

        def step(adapters=adapters, state=state, frozen=frozen):
            _, state["opt"], _ = train_step(model.family, adapters, model.cfg, [(x, y)],
                                            state["opt"], rng=None, grad_clip=0.0, lr=LR,
                                            weight_decay=0.0, objective=SFT, frozen=frozen)
        steps[path] = step
    return steps


def summary(times: dict) -> dict:
    numpy_ms, numba_ms = statistics.median(times["numpy"]), statistics.median(times["numba"])
    return {"numpy_ms": round(numpy_ms, 2), "numba_ms": round(numba_ms, 2),
            "ratio": round(numba_ms / numpy_ms, 3), "steps": len(times["numba"])}


def main() -> None:
    keep_freed_memory()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="shard: rounds of both paths")
    parser.add_argument("--block", type=int, default=10, help="shard: steps per path a round")
    parser.add_argument("--lora", action="store_true", help="also the SmolLM2 LoRA step")
    parser.add_argument("--lora-rounds", type=int, default=4, help="lora: rounds (1 step each)")
    args = parser.parse_args()
    result = {}
    with blas_threads(1):
        result["shard"] = summary(alternate(shard_steps(), args.rounds, args.block))
        print(f"shard step   numpy {result['shard']['numpy_ms']:8.2f} ms   numba "
              f"{result['shard']['numba_ms']:8.2f} ms   ratio {result['shard']['ratio']:.3f}")
        if args.lora:
            result["lora"] = summary(alternate(lora_steps(), args.lora_rounds, 1))
            print(f"LoRA step    numpy {result['lora']['numpy_ms']:8.1f} ms   numba "
                  f"{result['lora']['numba_ms']:8.1f} ms   ratio {result['lora']['ratio']:.3f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
