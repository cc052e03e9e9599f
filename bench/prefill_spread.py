"""A 512-token prefill of SmolLM2 with its attention tiles spread over Python threads
(kernels/spread.py, each tile's products on one BLAS thread) against the same tiles on one Python
thread with OpenBLAS's own threads, in one process, alternating rounds.

Why: a quiet 2-thread Q4_1 prefill measured ~10% slower than at 89fbcd6 (before the packed GGUF
blocks and before spread.py), while at one thread the two trees cost the same CPU time and the
packed and unpacked records the same (docs/performance.md, helper `share`). One suspect left at
two threads: after each layer's q|k|v product OpenBLAS's idle worker spins (it waits ~0.1 s
before it sleeps), so while spread.py's two Python threads run the attention three threads
share the two cores. This measures that on a quiet machine; on a busy one both sides spin.

    python bench/prefill_spread.py [--threads 2] [--rounds 5] [--dequantize] [--tokens 512]

Last line: one JSON object (per side: wall and process CPU seconds, best and median).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import glassformer.kernels.prefill as prefill
from glassformer.blas import blas_threads
from glassformer.io.pretrained import load_pretrained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="BLAS and numba threads")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--dequantize", action="store_true", help="float32, not the Q4_1 blocks")
    args = parser.parse_args()
    model = load_pretrained("smollm2", dequantize=args.dequantize)
    ids = np.random.default_rng(0).integers(0, model.cfg.vocab_size, (1, args.tokens))
    spread = prefill.spread

    def one_thread(items, work, workers, scratch):      # the tiles in order, BLAS's threads
        return spread(items, work, 1, scratch)
    sides = {"spread": spread, "blas_threads": one_thread}
    times = {name: [] for name in sides}
    with blas_threads(args.threads):
        for round_ in range(args.rounds + 1):           # round 0 warms up
            for name, function in sides.items():
                prefill.spread = function
                cache = model.new_cache(1, args.tokens + 8)
                cpu, wall = time.process_time(), time.perf_counter()
                model.forward(ids, kv_cache=cache, last_only=True)
                if round_:
                    times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    prefill.spread = spread
    out = {"threads": args.threads, "tokens": args.tokens, "dequantize": args.dequantize}
    for name, pairs in times.items():
        walls, cpus = [p[0] for p in pairs], [p[1] for p in pairs]
        out[name] = {"wall_s": round(min(walls), 3),
                     "wall_s_median": round(statistics.median(walls), 3),
                     "cpu_s": round(min(cpus), 3),
                     "cpu_s_median": round(statistics.median(cpus), 3)}
        print(name, json.dumps(out[name]))
    out["spread_over_blas_wall"] = round(out["spread"]["wall_s"] / out["blas_threads"]["wall_s"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
