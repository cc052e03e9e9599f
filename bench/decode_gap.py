"""What a decoded token costs beyond its matrix products, measured so that a busy machine can tell.

bench/generate.py's `bandwidth_share` is decode tokens/s against the streaming bandwidth; its
`products_only` is the same share for a token that cost only its products (every weight once,
back to back). Their ratio is the share of a token's time that is not products: norms, RoPE,
the attention over the cache, the residual adds, the kernels' and Python's calls, the LM head's
norm, sampling. This script measures that ratio alone, three ways in one alternation, best of
--rounds:

    gen    a greedy `generate` per token (after the prefill): what bench/generate.py times
    fwd    `model.forward` of one position with a KV cache per token: the layers and the head
    prod   the products only (bench/generate.py: decode_operands), back to back

and prints gen/prod and fwd/prod (1.0 = a token costs its products and nothing else). With
--cpu (and BLAS at one thread, --threads 1) every figure is the thread's CPU time, not the wall
clock: with seven other agents on two cores the wall clock mostly measures the queue, while the
CPU time still compares a tree with another (noisier in absolute terms: memory is shared too).

    python bench/decode_gap.py [--model smollm2|gpt2] [--rounds 3] [--cpu --threads 1]

Last line: one JSON object with gen_ms, fwd_ms, prod_ms and the two ratios.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from generate import decode_operands, our_model  # noqa: E402  (bench/generate.py)

from glassformer.blas import blas_threads, free_cores
from glassformer.generate.generate import generate

TOKENS = 32


def load(name: str):
    """(model, prompt ids (1, T)): the GPT-2-124M shape with random weights, or SmolLM2 f32."""
    if name == "gpt2":
        return our_model(), np.random.default_rng(2).integers(0, 50257, (1, 32))
    from glassformer.io.named_models import load_model
    model = load_model("smollm2", dequantize=True)
    return model, np.array([model.tokenizer.encode("The capital of France is")])


def per_token(model, prompt, clock) -> dict:
    """Seconds per token of each way, one run each."""
    steps = iter(generate(model, prompt, max_new_tokens=TOKENS + 1, temperature=0.0))
    next(steps)                                             # the prefill and the first token
    start = clock()
    for _ in steps:
        pass
    gen = (clock() - start) / TOKENS
    cache = model.new_cache(1, prompt.shape[1] + TOKENS + 1)
    model.forward(prompt, kv_cache=cache, last_only=True)
    cache.advance(prompt.shape[1])
    ids = prompt[:, -1:]
    start = clock()
    for _ in range(TOKENS):
        model.forward(ids, kv_cache=cache, last_only=True,
                      positions=np.array([[cache.length]]))
        cache.advance(1)
    fwd = (clock() - start) / TOKENS
    operands = decode_operands(model)
    rows = [np.ones((1, w.shape[0]), w.dtype) for w in operands]
    start = clock()
    for _ in range(TOKENS):
        for row, w in zip(rows, operands):
            row @ w
    prod = (clock() - start) / TOKENS
    return {"gen": gen, "fwd": fwd, "prod": prod}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2", "gpt2"], default="smollm2")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each way (best kept)")
    parser.add_argument("--cpu", action="store_true", help="the thread's CPU time, not the wall")
    parser.add_argument("--threads", type=int, default=0, help="BLAS threads (0: the CLI's rule)")
    args = parser.parse_args()
    model, prompt = load(args.model)
    clock = time.thread_time if args.cpu else time.perf_counter
    best = {"gen": float("inf"), "fwd": float("inf"), "prod": float("inf")}
    with blas_threads(args.threads or free_cores()):
        per_token(model, prompt, clock)                     # warm up (and compile)
        for _ in range(args.rounds):
            for way, seconds in per_token(model, prompt, clock).items():
                best[way] = min(best[way], seconds)
    result = {f"{way}_ms": round(seconds * 1e3, 2) for way, seconds in best.items()}
    result.update(model=args.model, clock="cpu" if args.cpu else "wall",
                  gen_over_prod=round(best["gen"] / best["prod"], 3),
                  fwd_over_prod=round(best["fwd"] / best["prod"], 3))
    for key, value in result.items():
        print(f"{key:16s} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
