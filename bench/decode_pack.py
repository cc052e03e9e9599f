"""Issue 44's cuts of a decoded token's calls, each measured against the path it replaces in one
process, alternating rounds (so a busy machine slows both alike):

    float32   SmolLM2-135M widened to float32: a layer's MLP end in one call (kernels/
              decode_numba.py's swiglu_down_norm_rows: SiLU, the down product, the residual and
              the next norm; 3 BLAS products + 3 kernels a layer) against the BLAS down product
              and two kernels (4 + 4), chosen by switching the decode plan's `down_t` off
              (blocks/decode_plan.py: rows_of)
    quant     SmolLM2's own Q4_1 file kept in its blocks: q|k|v and gate|up packed (blocks/
              packed.py, 121 products a token) against the same records unpacked (a copy of each
              record's blocks: 211)

For each: CPU ms per decoded token (the thread's time: with other agents on the cores the wall
clock mostly measures the queue) and wall ms, best and median of --rounds, greedy tokens after a
32-token prompt, and whether every variant gave the same tokens.

    python bench/decode_pack.py [--threads 1] [--new-tokens 24] [--rounds 8] [--parts float32,quant]

Last line: one JSON object (per part and variant: cpu_ms, cpu_ms_median, wall_ms, and the
ratios to the replaced path).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

import numpy as np

import glassformer.blocks.decode_plan as plan
from glassformer.blas import blas_threads
from glassformer.generate.generate import generate
from glassformer.io.pretrained import load_pretrained
from glassformer.models.model import Model
from glassformer.ops.quant import QuantizedMatrix

PROMPT = np.array([list(range(100, 132))])


def timed(model: Model, new_tokens: int) -> tuple[float, float, list[int]]:
    """(CPU ms, wall ms) per decoded token after the first, and the tokens."""
    steps = generate(model, PROMPT, max_new_tokens=new_tokens, temperature=0.0)
    next(steps)                                          # the prefill and the first token
    cpu, wall = time.process_time(), time.perf_counter()
    tokens = [int(np.asarray(step).ravel()[0]) for step in steps]
    n = len(tokens)
    return (1e3 * (time.process_time() - cpu) / n, 1e3 * (time.perf_counter() - wall) / n,
            tokens)


def alternate(variants: dict, new_tokens: int, rounds: int) -> dict:
    """variants: name -> (model, a function that sets the variant up). One warm-up round."""
    cpu = {name: [] for name in variants}
    wall = {name: [] for name in variants}
    tokens = {}
    for round_ in range(rounds + 1):
        for name, (model, setup) in variants.items():
            setup()
            c, w, tokens[name] = timed(model, new_tokens)
            if round_:
                cpu[name].append(c)
                wall[name].append(w)
    return {name: {"cpu_ms": round(min(cpu[name]), 2),
                   "cpu_ms_median": round(statistics.median(cpu[name]), 2),
                   "wall_ms": round(min(wall[name]), 2)} for name in variants} | {
        "same_tokens": len({tuple(t) for t in tokens.values()}) == 1}


def float32_part(new_tokens: int, rounds: int) -> dict:
    model = load_pretrained("smollm2", dequantize=True)
    rows_of = plan.rows_of

    def setting(down):
        def setup():     # a new cache per generate: each run gathers its plan with this
            plan.rows_of = down
        return model, setup
    result = alternate({"blas_down": setting(lambda w: None), "mlp_end": setting(rows_of)},
                       new_tokens, rounds)
    plan.rows_of = rows_of
    result["mlp_end"]["cpu_ratio"] = round(result["mlp_end"]["cpu_ms"]
                                           / result["blas_down"]["cpu_ms"], 3)
    return result


def quant_part(new_tokens: int, rounds: int) -> dict:
    packed = load_pretrained("smollm2")
    unpacked = Model(packed.cfg, {key: replace(value, blocks=value.blocks.copy())
                                  if isinstance(value, QuantizedMatrix) else value
                                  for key, value in packed.params.items()})
    result = alternate({"unpacked": (unpacked, lambda: None), "packed": (packed, lambda: None)},
                       new_tokens, rounds)
    result["packed"]["cpu_ratio"] = round(result["packed"]["cpu_ms"]
                                          / result["unpacked"]["cpu_ms"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="BLAS and numba threads")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--parts", default="float32,quant")
    args = parser.parse_args()
    out = {"threads": args.threads}
    with blas_threads(args.threads):
        for part in args.parts.split(","):
            fn = {"float32": float32_part, "quant": quant_part}[part]
            out[part] = fn(args.new_tokens, args.rounds)
            print(part, json.dumps(out[part]), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
