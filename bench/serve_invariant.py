"""The throughput cost of `serve --batch-invariant` (serve/invariant.py) at 8 clients.

One process, one model (SmolLM2 by default), two engines (serve/engine.py, in process: the HTTP
side is the same either way and is left out): the plain one and the batch-invariant one. Each
gets the same load: 8 client threads, each sending seeded sampled requests (temperature 0.8,
top_p 0.9, --max-tokens new tokens, no stop) one after the other, --requests in all. The two
engines take turns, --rounds times each (plain, invariant, plain, ...), so a busy machine's
load falls on both alike; each engine's tokens/s is its total tokens over its total time.

    python bench/serve_invariant.py [--model smollm2] [--requests 16] [--max-tokens 32]
                                    [--rounds 2] [--max-batch 8]

Last line: one JSON object: tokens/s of each, their ratio (invariant / plain) and the cost
(1 - ratio; goal <= 0.10).
"""
from __future__ import annotations

import argparse
import json
import threading
import time

from glassformer.blas import blas_threads, free_cores
from glassformer.generate.sampling import Sampling
from glassformer.io.named_models import load_model
from glassformer.serve.engine import Engine
from glassformer.serve.sequence import Delta, Sequence, Settings

CLIENTS = 8
TOPICS = ["a cat", "the sea", "bread", "a train", "winter", "a robot", "music", "a garden"]


class Reply:
    """One request's streamed text, its token count and the moment it ended."""

    def __init__(self):
        self.parts, self.tokens, self.done = [], 0, threading.Event()

    def __call__(self, event):
        if isinstance(event, Delta):
            self.parts.append(event.text)
        else:                                       # the end: its usage counts the tokens
            self.tokens = event.usage.completion_tokens
            self.done.set()


def load(engine: Engine, model, clients: int, requests: int, max_tokens: int) -> dict:
    """Run `requests` seeded sampled requests from `clients` threads: tokens, seconds and each
    reply's text (request k: a short story about TOPICS[k], seed k, temperature 0.8, top_p 0.9)."""
    tok = model.tokenizer
    lock, texts, count, next_request = threading.Lock(), {}, [0], [0]

    def client():
        while True:
            with lock:
                k = next_request[0]
                next_request[0] += 1
            if k >= requests:
                return
            prompt = tok.encode(f"<|im_start|>user\nWrite a short story about "
                                f"{TOPICS[k % len(TOPICS)]}, number {k}.<|im_end|>\n"
                                f"<|im_start|>assistant\n")
            reply = Reply()
            settings = Settings(max_tokens, Sampling(temperature=0.8, top_p=0.9), k)
            engine.submit([Sequence(0, prompt, settings, frozenset(), tok, reply)])
            reply.done.wait()
            with lock:
                count[0] += reply.tokens
                texts[k] = "".join(reply.parts)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"tokens": count[0], "seconds": time.perf_counter() - start, "texts": texts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--prefill-chunk", type=int, default=64)
    args = parser.parse_args()
    with blas_threads(free_cores()):        # as every command sizes BLAS (blas.py)
        run(args)


def run(args) -> None:
    model = load_model(args.model, dequantize=True)   # float32, as the invariant test serves it
    engines = {name: Engine(model, max_batch=args.max_batch, max_queue=64, max_len=512,
                            prefill_chunk=args.prefill_chunk, batch_invariant=name == "invariant")
               for name in ("plain", "invariant")}
    for engine in engines.values():
        engine.start()
        load(engine, model, CLIENTS, 2, 4)                 # warm: numba's kernels, BLAS
    totals = {name: [0, 0.0] for name in engines}
    for round_ in range(args.rounds):
        for name, engine in engines.items():
            got = load(engine, model, CLIENTS, args.requests, args.max_tokens)
            tokens, seconds = got["tokens"], got["seconds"]
            totals[name][0] += tokens
            totals[name][1] += seconds
            print(f"round {round_ + 1} {name:9s} {tokens} tokens in {seconds:.1f} s: "
                  f"{tokens / seconds:.1f} tokens/s", flush=True)
    for engine in engines.values():
        engine.stop()
    rate = {name: tokens / seconds for name, (tokens, seconds) in totals.items()}
    ratio = rate["invariant"] / rate["plain"]
    print(f"plain {rate['plain']:.1f} tokens/s, batch-invariant {rate['invariant']:.1f} "
          f"tokens/s: ratio {ratio:.3f}, cost {1 - ratio:.1%}")
    print(json.dumps({"model": args.model, "clients": CLIENTS, "requests": args.requests,
                      "max_tokens": args.max_tokens, "rounds": args.rounds,
                      "plain_tokens_per_s": round(rate["plain"], 2),
                      "invariant_tokens_per_s": round(rate["invariant"], 2),
                      "ratio": round(ratio, 4), "cost": round(1 - ratio, 4)}))


if __name__ == "__main__":
    main()
