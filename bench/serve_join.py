"""A long prompt joining running streams in `glassformer serve`: do the streams keep their pace?

For each --prefill-chunk mode (default: auto, the budget of serve/budget.py, and 64, a fixed
chunk; 'auto:apart' the same with --prefill-apart, each chunk a forward of its own instead of
riding in the decode step), one real server (`python -m glassformer serve --model smollm2 --context 8192
--max-batch 8 --prefill-chunk MODE`, loopback, a free port) and one run:

    1. 7 streaming /v1/completions clients start (greedy, end-of-text forbidden by logit_bias
       so none stops early) and run until each has BEFORE inter-token gaps: the unloaded gaps
    2. one more client sends a PROMPT_IDS-token prompt (max_tokens 4): the join; every
       stream's gaps from that moment to the joiner's first token, and the one after it (the
       step that copies the joiner into its row), are the gaps during the join
    3. AFTER more gaps of each stream (the 8 rows decoding, the timeline now 4k long), then
       everyone leaves

Reported per mode: the streams' p99 inter-token gap (client side) before and during the join
and its ratio, pooled over the 7 streams and the worst stream's own ratio (goal: <= 2x), the
joiner's time to first token, and the gaps after. The prompts are token ids (the server reads
ids as prompts), cut from tinyshakespeare, so the joiner has exactly PROMPT_IDS tokens.

    python bench/serve_join.py [--modes auto,64] [--prompt-ids 4000] [--before 40]

Last line: one JSON object, per mode.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from serve import wait_for_url   # bench/serve.py

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
STREAMS = 7
REQUEST_LIMIT_S = 1800.0


def start(model: str, log: Path, mode: str, context: int,
          extra: tuple = ()) -> tuple[subprocess.Popen, str]:
    """A server for `mode`: a --prefill-chunk value, ':apart' appended for --prefill-apart."""
    chunk, _, apart = mode.partition(":")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                  "")])}
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "glassformer", "serve", "--model", model, "--host",
             "127.0.0.1", "--port", "0", "--max-batch", str(STREAMS + 1), "--context",
             str(context), "--prefill-chunk", chunk] + (["--prefill-apart"] if apart else [])
            + list(extra),
            stdout=sink, stderr=sink, env=env)
    return process, wait_for_url(process, log, 3000)


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


def token_ids(model: str) -> tuple[list[int], list[int]]:
    """Shakespeare's ids under the model's tokenizer, and the ids that end a reply."""
    from glassformer.packaged import MODEL, resolve_path
    from glassformer.tokenizers.end_of_text import end_of_text_ids
    from glassformer.tokenizers.load import load_tokenizer
    tokenizer = load_tokenizer(resolve_path(model, MODEL))
    return tokenizer.encode(SHAKESPEARE.read_text(encoding="utf-8")[:60_000]), \
        end_of_text_ids(tokenizer)


class Stream:
    """One running client: the arrival time of every token chunk."""

    def __init__(self):
        self.times: list[float] = []
        self.leave = asyncio.Event()

    async def run(self, http, url: str, prompt: list[int], banned: dict) -> None:
        body = {"prompt": prompt, "max_tokens": 4000, "temperature": 0.0, "stream": True,
                "logit_bias": banned}
        async with http.stream("POST", url + "/v1/completions", json=body) as answer:
            answer.raise_for_status()
            async for line in answer.aiter_lines():
                if line.startswith("data: {"):
                    self.times.append(time.perf_counter())
                if self.leave.is_set():
                    return

    def gaps(self, start: float, end: float, through_next: bool = False) -> np.ndarray:
        """Gaps between consecutive tokens whose later token arrived in [start, end)
        (through_next: and the first one after end, the gap the join's last step is in)."""
        t = np.asarray(self.times)
        gaps = np.diff(t)
        if through_next:
            end = t[np.searchsorted(t, end)] + 1e-9 if t[-1] >= end else end
        return gaps[(t[1:] >= start) & (t[1:] < end)]


async def wait_for(condition, poll: float = 0.05) -> None:
    while not condition():
        await asyncio.sleep(poll)


async def join_run(url: str, ids: list[int], banned: dict, args) -> dict:
    streams = [Stream() for _ in range(STREAMS)]
    prompts = [ids[i * 40:(i + 1) * 40] for i in range(STREAMS)]             # 40 ids each
    long_prompt = ids[-args.prompt_ids:]
    async with httpx.AsyncClient(timeout=REQUEST_LIMIT_S) as http:
        tasks = [asyncio.create_task(s.run(http, url, p, banned))
                 for s, p in zip(streams, prompts)]
        warm = args.warmup + 1
        await wait_for(lambda: all(len(s.times) >= warm for s in streams))
        unloaded_from = time.perf_counter()
        await wait_for(lambda: all(len(s.times) >= warm + args.before for s in streams))
        joined_at = time.perf_counter()
        first: list[float] = []
        body = {"prompt": long_prompt, "max_tokens": 4, "temperature": 0.0, "stream": True}
        async with http.stream("POST", url + "/v1/completions", json=body) as answer:
            answer.raise_for_status()
            async for line in answer.aiter_lines():
                if line.startswith("data: {") and not first:
                    first.append(time.perf_counter())
        counts = [len(s.times) for s in streams]
        await wait_for(lambda: all(len(s.times) >= n + args.after
                                   for s, n in zip(streams, counts)))
        for s in streams:
            s.leave.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    joined = first[0]

    def p99(values) -> float:
        return float(np.percentile(values, 99))
    before = [s.gaps(unloaded_from, joined_at) for s in streams]
    during = [s.gaps(joined_at, joined, through_next=True) for s in streams]
    after = [s.gaps(joined, float("inf"))[1:] for s in streams]
    pooled_before, pooled_during = p99(np.concatenate(before)), p99(np.concatenate(during))
    per_stream = [p99(d) / p99(b) for b, d in zip(before, during) if d.size and b.size]
    return {"itl_p99_before_s": round(pooled_before, 4),
            "itl_p99_during_s": round(pooled_during, 4),
            "ratio_p99": round(pooled_during / pooled_before, 2),
            "worst_stream_ratio_p99": round(max(per_stream), 2),
            "itl_p50_before_s": round(float(np.median(np.concatenate(before))), 4),
            "itl_p50_during_s": round(float(np.median(np.concatenate(during))), 4),
            "itl_p99_after_s": round(p99(np.concatenate(after)), 4),
            "gaps_before": int(sum(b.size for b in before)),
            "gaps_during": int(sum(d.size for d in during)),
            "joiner_ttft_s": round(joined - joined_at, 2), "prompt_ids": len(long_prompt)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--modes", default="auto,64",
                        help="--prefill-chunk values to compare, comma-separated; ':apart' "
                             "after one adds --prefill-apart (chunks as forwards of their own, "
                             "not in the decode step): e.g. auto,auto:apart,64")
    parser.add_argument("--prompt-ids", type=int, default=4000)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--warmup", type=int, default=5, help="gaps of each stream not counted")
    parser.add_argument("--before", type=int, default=40, help="unloaded gaps of each stream")
    parser.add_argument("--after", type=int, default=10, help="gaps of each stream after")
    parser.add_argument("--dequantize", action="store_true",
                        help="serve the model in float32 (serve --dequantize), not its GGUF blocks")
    args = parser.parse_args()
    ids, ends = token_ids(args.model)
    if len(ids) < args.prompt_ids + STREAMS * 40:
        raise SystemExit(f"{SHAKESPEARE} gives only {len(ids)} ids")
    banned = {str(i): -100 for i in ends}                       # streams never end on their own
    results = {}
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            process, url = start(args.model, Path(scratch) / "server.log", mode, args.context,
                                 ("--dequantize",) if args.dequantize else ())
            try:
                results[mode] = asyncio.run(join_run(url, ids, banned, args))
            finally:
                stop(process)
        r = results[mode]
        print(f"--prefill-chunk {mode}: streams' p99 gap {r['itl_p99_before_s']} s before, "
              f"{r['itl_p99_during_s']} s while {r['prompt_ids']} ids join: "
              f"{r['ratio_p99']}x (worst stream {r['worst_stream_ratio_p99']}x; goal <= 2x); "
              f"joiner's TTFT {r['joiner_ttft_s']} s; p99 after {r['itl_p99_after_s']} s",
              flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
