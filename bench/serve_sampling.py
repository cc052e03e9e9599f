"""What the sampler's fast paths (nucleus.py, draw.py) buy a server, and that it picks the same.

One process, one model (SmolLM2 by default), one engine (serve/engine.py, in process: the HTTP
side is left out), the same load twice per round: with the sampler as it is (`top_p_filter` on
the k largest values, `draw` without the softmax) and with the references swapped in
(`top_p_sorted`, a stable argsort of all V logits per row, and `draw_reference`, the softmax and
draw_ids: what every step did before). Load: --clients threads sending seeded sampled
requests (temperature 0.8, top_p 0.9: bench/serve_invariant.py's) one after the other,
--requests in all, --max-tokens each. Reported per sampler: tokens/s, the seconds spent in
`sample` per decode step, and whether every request's text is the same both ways (it must be:
the fast paths give the references' ids, token for token).

    python bench/serve_sampling.py [--clients 1,8] [--requests 16] [--max-tokens 32] [--rounds 1]

Last line: one JSON object, per client count: each sampler's tokens/s and ms in `sample` per
call, their ratio, and `same_text`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from glassformer.blas import blas_threads, free_cores
from glassformer.generate import draw, nucleus, sampling
from glassformer.io.named_models import load_model
from glassformer.serve import engine as engine_module
from glassformer.serve.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.serve_invariant import load         # noqa: E402  (run as a script): its requests

SAMPLERS = {"now": (nucleus.top_p_filter, draw.draw),
            "before": (nucleus.top_p_sorted, draw.draw_reference)}


class Timed:
    """engine.sample with a stopwatch: calls and seconds inside it."""

    def __init__(self, sample):
        self.sample, self.calls, self.seconds = sample, 0, 0.0

    def __call__(self, *args, **kwargs):
        began = time.perf_counter()
        ids = self.sample(*args, **kwargs)
        self.seconds += time.perf_counter() - began
        self.calls += 1
        return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with blas_threads(free_cores()):        # as every command sizes BLAS (blas.py)
        run(args)


def run(args) -> None:
    model = load_model(args.model)
    engine = Engine(model, max_batch=8, max_queue=64, max_len=512)
    timed = Timed(engine_module.sample)
    engine_module.sample = timed            # note: a bench's stopwatch, not the server's code
    engine.start()
    load(engine, model, 2, 2, 4)                                    # warm: numba, BLAS
    results = {}
    for clients in [int(c) for c in args.clients.split(",")]:
        requests = args.requests if clients > 1 else max(2, args.requests // 4)
        totals = {name: [0, 0.0, 0, 0.0] for name in SAMPLERS}     # tokens, s, calls, s in
        texts = {}
        for round_ in range(args.rounds):
            for name, (top_p, pick) in SAMPLERS.items():
                sampling.top_p_filter, sampling.draw = top_p, pick     # what `sample` calls
                calls, inside = timed.calls, timed.seconds
                got = load(engine, model, clients, requests, args.max_tokens)
                row = totals[name]
                row[0] += got["tokens"]
                row[1] += got["seconds"]
                row[2] += timed.calls - calls
                row[3] += timed.seconds - inside
                texts.setdefault(name, got["texts"])
                print(f"{clients} clients, round {round_ + 1}, {name:6s}: {got['tokens']} "
                      f"tokens in {got['seconds']:.1f} s, {got['tokens'] / got['seconds']:.2f} "
                      f"tokens/s; {1e3 * row[3] / max(1, row[2]):.1f} ms a `sample` call",
                      flush=True)
        same = texts["now"] == texts["before"]
        rate = {name: row[0] / row[1] for name, row in totals.items()}
        results[clients] = {
            **{f"{name.replace(' ', '_')}_tokens_per_s": round(rate[name], 2)
               for name in SAMPLERS},
            **{f"{name.replace(' ', '_')}_sample_ms": round(1e3 * row[3] / max(1, row[2]), 2)
               for name, row in totals.items()},
            "ratio": round(rate["now"] / rate["before"], 3), "same_text": same}
        print(f"{clients} clients: now {rate['now']:.2f} tokens/s, before "
              f"{rate['before']:.2f}: {results[clients]['ratio']:.2f}x; same text: {same}",
              flush=True)
    sampling.top_p_filter, sampling.draw = nucleus.top_p_filter, draw.draw
    engine.stop()
    print(json.dumps({"model": args.model, "requests": args.requests,
                      "max_tokens": args.max_tokens, "rounds": args.rounds,
                      "clients": results}))


if __name__ == "__main__":
    main()
