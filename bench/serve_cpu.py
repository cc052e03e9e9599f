"""bench/serve.py's comparison in CPU seconds of the engine's thread: 8 requests one at a time
against the same 8 at once, in one process, no HTTP. Where each way's time goes, by phase.

On a busy machine bench/serve.py's wall clock counts the other programs' turns; the CPU time of
the engine's thread does not. Same requests as bench/serve.py (its 8 prompts, --max-tokens,
temperature 0.8, seed k), the engine as `glassformer serve` builds it (serve/run.py's
make_engine: --prefill-chunk 64, the mixed step) on SmolLM2 (Q4_1 kept; --dequantize: float32;
--activation-quant q8). "At once" submits the 8 together, so they are prefilled together (in
bench/serve.py they arrive within a few ms: the first may start alone and the others join it
in the mixed step). One BLAS and one numba thread unless --threads says otherwise. `--held`:
the rows keep the prompts of the way before, so request k reuses its prefix in row k (one at a
time, it runs alone in row k).

Phases (CPU ms of the engine's thread, summed over the run): `prefill` (a joining chunk fed on
its own and the joiners' first tokens: Prefill.feed, Engine.joined), `mixed` (a step that
decodes and feeds a chunk, mixed.py), `decode` (RowCache.decode: the model's step), `choose`
(the sampler, the tokens handed to their sequences; the part of `decode` steps outside the
forward), `other` (the engine's loop around them).

    python bench/serve_cpu.py [--max-tokens 32] [--dequantize | --activation-quant q8]

Last line: one JSON object: each way's tokens, CPU seconds, tokens per CPU second and phases,
and the ratio of tokens per CPU second (8 at once over one at a time; bench/serve.py's ratio
without the HTTP side and the other programs' load).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from glassformer.blas import blas_threads
from glassformer.generate.sampling import Sampling
from glassformer.io.named_models import load_model
from glassformer.serve import engine as engine_module
from glassformer.serve.rows import RowCache
from glassformer.serve.run import make_engine
from glassformer.serve.sequence import Sequence, Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.serve import PROMPTS                 # noqa: E402  (run as a script): its requests
from bench.serve_invariant import Reply         # noqa: E402

PHASES = ("prefill", "mixed", "decode", "choose")


class Stopwatch:
    """CPU seconds of the calling thread inside each wrapped function, by phase; a phase
    called inside another (choose inside decode) is taken out of the outer one."""

    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.inner = 0.0

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            began, inner = time.thread_time(), self.inner
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - began
                self.seconds[phase] += spent - (self.inner - inner)
                self.inner = inner + spent
        return timed


def run_way(engine, model, stopwatch, max_tokens: int, together: bool, held: bool) -> dict:
    """The 8 requests one at a time or all at once: tokens and the engine thread's CPU time.
    held: the rows keep what the run before left (each prompt's row holds it: reused)."""
    tok = model.tokenizer
    for row in range(len(engine.running) if not held else 0):   # nothing held (idle: the
        engine.rows.forget(row)                  # engine waits), as a fresh server's rows
    before, started = dict(stopwatch.seconds), engine_cpu(engine)
    process = time.process_time()
    tokens = 0
    batches = [range(len(PROMPTS))] if together else [[k] for k in range(len(PROMPTS))]
    for batch in batches:
        replies = [Reply() for _ in batch]
        engine.submit([Sequence(0, tok.encode(PROMPTS[k]),
                                Settings(max_tokens, Sampling(temperature=0.8), k),
                                frozenset(), tok, reply) for k, reply in zip(batch, replies)])
        for reply in replies:
            reply.done.wait()
            tokens += reply.tokens
    cpu = engine_cpu(engine) - started
    phases = {p: round(1e3 * (stopwatch.seconds[p] - before[p]), 1) for p in PHASES}
    phases["other"] = round(1e3 * cpu - sum(phases.values()), 1)
    return {"tokens": tokens, "cpu_s": round(cpu, 3), "tok_per_cpu_s": round(tokens / cpu, 1),
            "process_cpu_s": round(time.process_time() - process, 3), "phases_ms": phases}


def threads_then(count: int, loop):
    """The engine's loop with numba's thread count set in its own thread first (numba's count
    is per thread: a new thread starts with every core, whatever the main thread set)."""
    def run():
        import numba
        numba.set_num_threads(count)
        loop()
    return run


def engine_cpu(engine) -> float:
    """CPU seconds the engine's thread has used (Linux: its /proc task stat)."""
    return time.clock_gettime(time.pthread_getcpuclockid(engine.thread.ident))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="BLAS and numba threads")
    parser.add_argument("--dequantize", action="store_true", help="SmolLM2 in float32")
    parser.add_argument("--activation-quant", choices=("float32", "q8"), default="float32")
    parser.add_argument("--rounds", type=int, default=2, help="each way this often, best kept")
    parser.add_argument("--held", action="store_true",
                        help="keep the prompts the rows hold from the way before (a chat's "
                             "next turns: each request reuses its prefix in the row holding it)")
    args = parser.parse_args()
    extra = {"activations": "q8"} if args.activation_quant == "q8" else {}
    model = load_model("smollm2", dequantize=args.dequantize, **extra)
    with blas_threads(args.threads):
        engine = make_engine(model, max_batch=8, max_queue=64, context=1024, prefill_chunk=64)
        stopwatch = Stopwatch()
        engine.feed_joiners = stopwatch.wrap("prefill", engine.feed_joiners)
        engine.joined = stopwatch.wrap("prefill", engine.joined)
        engine.mixed_step = stopwatch.wrap("mixed", engine.mixed_step)
        engine.choose = stopwatch.wrap("choose", engine.choose)
        decode = RowCache.decode
        RowCache.decode = stopwatch.wrap("decode", decode)   # a bench's stopwatch only
        engine.thread = threading.Thread(target=threads_then(args.threads, engine.loop),
                                         name="glassformer-engine", daemon=True)
        engine.start()
        run_way(engine, model, stopwatch, 4, True, False)            # warm: numba, BLAS
        best = {}
        for _ in range(args.rounds):
            for name, together in (("one_at_a_time", False), ("eight_at_once", True)):
                got = run_way(engine, model, stopwatch, args.max_tokens, together, args.held)
                print(f"{name:14s} {got['tokens']} tokens, {got['cpu_s']:.2f} s CPU, "
                      f"{got['tok_per_cpu_s']:.1f} tokens/CPU s (the process: "
                      f"{got['process_cpu_s']:.2f} s); ms {got['phases_ms']}",
                      flush=True)
                if name not in best or got["tok_per_cpu_s"] > best[name]["tok_per_cpu_s"]:
                    best[name] = got
        engine.stop()
        RowCache.decode = decode
    ratio = best["eight_at_once"]["tok_per_cpu_s"] / best["one_at_a_time"]["tok_per_cpu_s"]
    result = {"model": "smollm2 " + ("float32" if args.dequantize else "q4_1")
              + (" q8 activations" if extra else ""), "threads": args.threads, **best,
              "ratio": round(ratio, 2)}
    print(f"8 at once over one at a time, tokens per CPU second of the engine: {ratio:.2f}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
