"""/metrics: what the server has done and is doing, in Prometheus's text format, by hand.

    glassformer_requests_total{route, status}    counter   every answered request
    glassformer_prompt_tokens_total              counter   prompt ids of generating requests
    glassformer_completion_tokens_total          counter   ids they generated
    glassformer_queue_depth                      gauge     sequences waiting for a row
    glassformer_rows_in_use / glassformer_rows   gauge     rows running / rows there are
    glassformer_time_to_first_token_seconds      histogram submit -> a sequence's first token
    glassformer_inter_token_latency_seconds      histogram one token of a sequence -> the next

The format (https://prometheus.io/docs/instrumenting/exposition_formats/) is lines of
`name{label="value"} number`, a `# TYPE` line before each family, and a histogram as cumulative
`_bucket{le=...}` counts with `_sum` and `_count`: a few lines of text, so no dependency.
The engine's thread records token times, the event loop records requests: one lock guards both.
`MetricsMiddleware` counts every request on its way out and answers GET /metrics itself (no key
asked, as vLLM's; it tells only counts and times).
"""
from __future__ import annotations

import bisect
import threading
import time

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
ROUTES = ("/", "/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions",
          "/v1/embeddings")   # any other path is counted as "other": labels stay few


class Histogram:
    """Counts of observations at or under each bound, their sum and count."""

    def __init__(self, bounds: tuple):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)           # the last: above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def lines(self, name: str) -> list[str]:
        out, running = [f"# TYPE {name} histogram"], 0
        for bound, count in zip(self.bounds + ("+Inf",), self.counts):
            running += count
            out.append(f'{name}_bucket{{le="{bound}"}} {running}')
        return out + [f"{name}_sum {self.total:.6f}", f"{name}_count {running}"]


class Metrics:
    """A server's counters and histograms (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)

    def request(self, path: str, status: int, usage=None) -> None:
        route = path if path in ROUTES else "other"
        with self.lock:
            self.requests[route, status] = self.requests.get((route, status), 0) + 1
            if usage is not None:
                self.prompt_tokens += usage.prompt_tokens
                self.completion_tokens += usage.completion_tokens

    def tokens_chosen(self, seqs, now: float | None = None) -> None:
        """Each sequence just got a token: its time to first token or since its last one."""
        now = time.perf_counter() if now is None else now
        with self.lock:
            for seq in seqs:
                if seq.last_token_at is None:
                    self.ttft.observe(now - seq.submitted_at)
                else:
                    self.itl.observe(now - seq.last_token_at)
                seq.last_token_at = now

    def text(self, engine=None) -> str:
        """The exposition: every family, the gauges read from the engine now (0 without one)."""
        waiting = len(engine.waiting) if engine is not None else 0
        in_use = sum(seq is not None for seq in engine.running) if engine is not None else 0
        rows = len(engine.running) if engine is not None else 0
        with self.lock:
            lines = ["# HELP glassformer_requests_total Requests answered, by route and status.",
                     "# TYPE glassformer_requests_total counter"]
            lines += [f'glassformer_requests_total{{route="{route}",status="{status}"}} {n}'
                      for (route, status), n in sorted(self.requests.items())]
            for name, value, kind in [
                    ("prompt_tokens_total", self.prompt_tokens, "counter"),
                    ("completion_tokens_total", self.completion_tokens, "counter"),
                    ("queue_depth", waiting, "gauge"), ("rows_in_use", in_use, "gauge"),
                    ("rows", rows, "gauge")]:
                lines += [f"# TYPE glassformer_{name} {kind}", f"glassformer_{name} {value}"]
            lines += self.ttft.lines("glassformer_time_to_first_token_seconds")
            lines += self.itl.lines("glassformer_inter_token_latency_seconds")
        return "\n".join(lines) + "\n"


class MetricsMiddleware:
    """ASGI middleware: counts each request's route and status (and its tokens, from the
    request's record) when it ends, and answers GET /metrics."""

    def __init__(self, app, metrics: Metrics, engine=None):
        self.app, self.metrics, self.engine = app, metrics, engine

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 0}

        async def send_noting_status(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if scope["path"] == "/metrics" and scope["method"] == "GET":
                await self.page(send_noting_status)
            else:
                await self.app(scope, receive, send_noting_status)
        finally:
            self.metrics.request(scope["path"], status["code"],
                                 scope.get("glassformer", {}).get("usage"))

    async def page(self, send) -> None:
        body = self.metrics.text(self.engine).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
