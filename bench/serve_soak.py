"""Soak `glassformer serve`: N clients for M seconds of mixed, faulty traffic, on loopback only.

One real server (`python -m glassformer serve --port 0`, on 127.0.0.1) and N asyncio clients,
each drawing its next request from a seeded mix until the time is up (every request also has a
time limit, and the number of requests is bounded by --max-requests):

    stream      a streamed chat reply read to its end (TTFT and inter-token gaps measured)
    whole       a whole /v1/completions reply
    leave       a streamed reply the client drops after a few chunks
    slow        a streamed reply read with a pause between chunks (a reader that lags)
    malformed   a body that is not JSON, or JSON of the wrong shape (400 expected)
    oversized   a body past the server's 4 MiB limit (413 expected)
    too_long    a prompt past --context (400 expected)

Every few seconds a sampler reads /metrics (rows in use, queue depth) and the server's RSS
(/proc/PID/status). At the end: requests per second, completion tokens per second, p50/p99
time to first token and inter-token latency (client side), answers by status, whether any
answer was a 500, whether every row is free (/metrics rows_in_use 0), RSS over time, and whether
the greedy whole replies that completed under load equal the same requests sent alone after
(every one, unless --check N), the server's RSS growth after the first minute, and `pass`: the
issue's goals each True or False (no 500, every row free, RSS growth <= 5%, greedy equal alone).

    python bench/serve_soak.py [--model smollm2] [--clients 8] [--seconds 60]
    python bench/serve_soak.py --clients 32 --seconds 600      # the issue's soak

Last line: one JSON object with those figures.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
from serve import wait_for_url   # bench/serve.py

ROOT = Path(__file__).resolve().parents[1]
# the soak: 20% of requests from clients leaving mid-stream, 5% malformed bodies
MIX = {"stream": 40, "whole": 25, "leave": 20, "slow": 5, "malformed": 5, "oversized": 2,
       "too_long": 3}
REQUEST_LIMIT_S = 300.0          # no single request waits longer than this
SAMPLE_EVERY_S = 5.0
WARM_S = 60.0                    # RSS growth is counted from the first sample after this
WORDS = "the a cat dog ran sat over under quickly house river moon light".split()


def start(model: str, log: Path, context: int, batch: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                  "")])}
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "glassformer", "serve", "--model", model, "--host",
             "127.0.0.1", "--port", "0", "--max-batch", str(batch), "--context", str(context)],
            stdout=sink, stderr=sink, env=env)
    return process, wait_for_url(process, log, 3000)


def rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024


def metrics(text: str) -> dict:
    found = {}
    for name in ("rows_in_use", "queue_depth", "completion_tokens_total"):
        hit = re.search(rf"^glassformer_{name} (\S+)$", text, re.M)
        found[name] = float(hit.group(1)) if hit else None
    return found


class Soak:
    def __init__(self, url: str, args, rng: random.Random):
        self.url, self.args, self.rng = url, args, rng
        self.status: Counter = Counter()
        self.kinds: Counter = Counter()
        self.ttft: list[float] = []
        self.gaps: list[float] = []
        self.tokens = 0
        self.started = 0
        self.greedy: dict[str, str] = {}       # a whole greedy reply that completed, by prompt

    def prompt(self) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(3, 40)))

    async def client(self, http: httpx.AsyncClient, deadline: float) -> None:
        kinds, weights = list(MIX), list(MIX.values())
        while time.monotonic() < deadline and self.started < self.args.max_requests:
            self.started += 1
            kind = self.rng.choices(kinds, weights)[0]
            self.kinds[kind] += 1
            try:
                await asyncio.wait_for(getattr(self, kind)(http), REQUEST_LIMIT_S)
            except (httpx.HTTPError, asyncio.TimeoutError) as err:
                self.status[f"client error {type(err).__name__}"] += 1

    def chat_body(self, stream: bool) -> dict:
        return {"messages": [{"role": "user", "content": self.prompt()}], "stream": stream,
                "max_tokens": self.args.max_tokens, "temperature": 0.8,
                "seed": self.rng.randint(0, 10 ** 6), "stream_options": {"include_usage": True}}

    async def streamed(self, http, *, drop_after: int | None = None, pause: float = 0.0):
        start = time.perf_counter()
        last, chunks = None, 0
        async with http.stream("POST", self.url + "/v1/chat/completions",
                               json=self.chat_body(True)) as answer:
            self.status[answer.status_code] += 1
            async for line in answer.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    self.tokens += chunk["usage"]["completion_tokens"]
                if not (chunk.get("choices") and chunk["choices"][0]["delta"].get("content")):
                    continue
                now = time.perf_counter()
                if drop_after is None and pause == 0.0:
                    (self.ttft.append(now - start) if last is None
                     else self.gaps.append(now - last))
                last, chunks = now, chunks + 1
                if drop_after is not None and chunks >= drop_after:
                    return                               # leaving mid-stream: the row frees
                if pause:
                    await asyncio.sleep(pause)

    async def stream(self, http):
        await self.streamed(http)

    async def leave(self, http):
        await self.streamed(http, drop_after=self.rng.randint(1, 3))

    async def slow(self, http):
        await self.streamed(http, pause=self.args.slow_pause)

    async def whole(self, http):
        body = {"prompt": self.prompt(), "max_tokens": self.args.max_tokens, "temperature": 0.0}
        answer = await http.post(self.url + "/v1/completions", json=body)
        self.status[answer.status_code] += 1
        if answer.status_code == 200:
            reply = answer.json()
            self.tokens += reply["usage"]["completion_tokens"]
            self.greedy[body["prompt"]] = reply["choices"][0]["text"]

    async def malformed(self, http):
        body = self.rng.choice([b"{not json", b"[1, 2]", json.dumps(
            {"prompt": "hi", "temperature": "hot"}).encode(), b'{"prompt": ' + b"[" * 100,
            json.dumps({"prompt": "hi", "logit_bias": {"5": 1000}}).encode()])
        answer = await http.post(self.url + "/v1/completions", content=body)
        self.status[answer.status_code] += 1

    async def oversized(self, http):
        answer = await http.post(self.url + "/v1/completions",
                                 content=b'{"prompt": "' + b"x" * (5 * 1024 * 1024) + b'"}')
        self.status[answer.status_code] += 1

    async def too_long(self, http):
        answer = await http.post(self.url + "/v1/completions", json={
            "prompt": "word " * (self.args.context + 10), "max_tokens": 4})
        self.status[answer.status_code] += 1


async def sampler(url: str, pid: int, deadline: float, seen: list) -> None:
    async with httpx.AsyncClient(timeout=30.0) as http:
        start = time.monotonic()
        while time.monotonic() < deadline:
            text = (await http.get(url + "/metrics")).text
            seen.append({"t_s": round(time.monotonic() - start, 1), "rss_mib": round(
                rss_mib(pid), 1), **metrics(text)})
            await asyncio.sleep(SAMPLE_EVERY_S)


async def soak(url: str, pid: int, args) -> dict:
    rng = random.Random(args.seed)
    run = Soak(url, args, rng)
    seen: list = []
    start = time.monotonic()
    deadline = start + args.seconds
    limits = httpx.Limits(max_connections=args.clients + 2)
    async with httpx.AsyncClient(timeout=REQUEST_LIMIT_S, limits=limits) as http:
        await asyncio.gather(sampler(url, pid, deadline, seen),
                             *(run.client(http, deadline) for _ in range(args.clients)))
    seconds = time.monotonic() - start
    async with httpx.AsyncClient(timeout=30.0) as http:
        for _ in range(60):                              # rows of the last leavers free
            final = metrics((await http.get(url + "/metrics")).text)
            if final["rows_in_use"] == 0 and final["queue_depth"] == 0:
                break
            await asyncio.sleep(1.0)
        # every greedy reply that completed under load equals the same request alone
        checked = list(run.greedy.items())[:args.check]             # --check None: all
        mismatches = 0
        for prompt, text in checked:
            answer = await http.post(url + "/v1/completions", timeout=REQUEST_LIMIT_S, json={
                "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0.0})
            mismatches += answer.json()["choices"][0]["text"] != text
    seen.append({"t_s": round(time.monotonic() - start, 1), "rss_mib": round(rss_mib(pid), 1),
                 **final})

    def pct(values, q):
        return round(float(np.percentile(values, q)), 3) if values else None
    growth = rss_growth(seen, WARM_S)
    return {"clients": args.clients, "seconds": round(seconds, 1),
            "requests": sum(run.kinds.values()), "kinds": dict(run.kinds),
            "requests_per_s": round(sum(run.kinds.values()) / seconds, 2),
            "completion_tok_s": round(run.tokens / seconds, 2),
            "ttft_p50_s": pct(run.ttft, 50), "ttft_p99_s": pct(run.ttft, 99),
            "itl_p50_s": pct(run.gaps, 50), "itl_p99_s": pct(run.gaps, 99),
            "status": {str(k): v for k, v in sorted(run.status.items(), key=str)},
            "status_500": run.status.get(500, 0), "rows_in_use_at_end": final["rows_in_use"],
            "greedy_checked": len(checked), "greedy_mismatches": mismatches,
            "rss_growth_after_1min": growth,
            "rss_mib": [s["rss_mib"] for s in seen], "samples": seen}


def rss_growth(seen: list, warm_s: float) -> float | None:
    """The server's RSS growth from the first sample after warm_s to the largest one after it,
    as a fraction (the first minute allocates the rows' buffers and BLAS's; it is not counted)."""
    after = [s["rss_mib"] for s in seen if s["t_s"] >= warm_s]
    return round(max(after) / after[0] - 1, 4) if len(after) > 1 else None


def verdict(result: dict) -> dict:
    """The issue's soak goals, each True or False: no 500 (nor engine fault, nor traceback),
    every row free at the end, RSS growth <= 5% after the first minute, every greedy reply that
    completed equal to the same request alone."""
    growth = result["rss_growth_after_1min"]
    return {"no_500": result["status_500"] == 0 and result["engine_faults_in_log"] == 0
            and result["tracebacks_in_log"] == 0,
            "rows_free_at_end": result["rows_in_use_at_end"] == 0,
            "rss_growth_le_5pct": growth is not None and growth <= 0.05,
            "greedy_equal_alone": result["greedy_mismatches"] == 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=10_000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--slow-pause", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", type=int, default=None,
                        help="greedy replies re-asked alone at the end and compared "
                             "(default: every one that completed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "server.log"
        process, url = start(args.model, log, args.context, args.clients)
        try:
            result = asyncio.run(soak(url, process.pid, args))
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        text = log.read_text(encoding="utf-8")
        tracebacks = text.count("Traceback")
    result["tracebacks_in_log"] = tracebacks
    result["engine_faults_in_log"] = text.count("engine fault")
    result["pass"] = verdict(result)
    print(f"{result['requests']} requests in {result['seconds']} s from {args.clients} clients: "
          f"{result['requests_per_s']} req/s, {result['completion_tok_s']} completion tok/s")
    print(f"TTFT p50/p99 {result['ttft_p50_s']}/{result['ttft_p99_s']} s, inter-token p50/p99 "
          f"{result['itl_p50_s']}/{result['itl_p99_s']} s")
    print(f"answers by status: {result['status']}; 500s: {result['status_500']}; rows in use at "
          f"the end: {result['rows_in_use_at_end']}; tracebacks in the log: {tracebacks}")
    print(f"greedy replies equal alone: {result['greedy_checked'] - result['greedy_mismatches']}"
          f" of {result['greedy_checked']}")
    print(f"RSS growth after the first minute: {result['rss_growth_after_1min']}; goals: "
          f"{result['pass']}")
    print("RSS MiB over time: " + " ".join(f"{s['t_s']}s:{s['rss_mib']}"
                                           for s in result["samples"]))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))


if __name__ == "__main__":
    main()
