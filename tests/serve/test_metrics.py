"""/metrics (serve/metrics.py): Prometheus's text format, parsed back; requests by route and
status, tokens, rows and queue, TTFT and inter-token histograms that count what was served."""
import json
import re

import httpx
import openai
import pytest
from serve_models import save_chat_model
from serve_process import start_server

from glassformer.serve.metrics import Histogram, Metrics

TIMEOUT_S = 60.0
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def parse(text: str) -> dict:
    """{(name, labels): value} from the exposition; every line must be a comment or a sample."""
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (TYPE \S+ (counter|gauge|histogram)|HELP \S+ .+)$", line), line
            continue
        found = LINE.match(line)
        assert found, line
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', found.group(2) or "")))
        samples[found.group(1), labels] = float(found.group(3))
    return samples


def test_histogram_buckets_are_cumulative():
    hist = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        hist.observe(value)
    samples = parse("\n".join(hist.lines("h")))
    assert [samples["h_bucket", (("le", le),)] for le in ("0.1", "1.0", "+Inf")] == [2, 3, 4]
    assert samples["h_count", ()] == 4 and samples["h_sum", ()] == pytest.approx(3.65)
    assert parse(Metrics().text())["glassformer_rows_in_use", ()] == 0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = save_chat_model(tmp_path_factory.mktemp("tiny") / "tinychat")
    running = start_server(folder, tmp_path_factory.mktemp("log"), "--max-batch", "3")
    yield running
    assert running.stop() == 0


def test_metrics_count_what_was_served(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                           timeout=TIMEOUT_S)
    whole = client.completions.create(model="tinychat", prompt="hello", max_tokens=5,
                                      temperature=0.0)
    chunks = list(client.chat.completions.create(
        model="tinychat", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        temperature=0.0, stream=True, stream_options={"include_usage": True}))
    streamed = chunks[-1].usage
    bad = httpx.post(server.url + "/v1/completions", content=b"{nope", timeout=TIMEOUT_S)
    assert bad.status_code == 400
    httpx.get(server.url + "/no/such/path", timeout=TIMEOUT_S)
    answer = httpx.get(server.url + "/metrics", timeout=TIMEOUT_S)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    samples = parse(answer.text)

    def requests(route, status):
        return samples.get(("glassformer_requests_total",
                            (("route", route), ("status", status))), 0)
    assert requests("/v1/completions", "200") == 1 and requests("/v1/completions", "400") == 1
    assert requests("/v1/chat/completions", "200") == 1 and requests("other", "404") == 1
    assert samples["glassformer_prompt_tokens_total", ()] == (whole.usage.prompt_tokens
                                                            + streamed.prompt_tokens)
    assert samples["glassformer_completion_tokens_total", ()] == (
        whole.usage.completion_tokens + streamed.completion_tokens)
    assert samples["glassformer_rows_in_use", ()] == 0 and samples["glassformer_rows", ()] == 3
    assert samples["glassformer_queue_depth", ()] == 0
    ttft = "glassformer_time_to_first_token_seconds"
    assert samples[ttft + "_count", ()] == 2                    # one per sequence
    itl = "glassformer_inter_token_latency_seconds"
    tokens = whole.usage.completion_tokens + streamed.completion_tokens
    # each sequence's later tokens (a stop id ending a reply is a step too, not in the usage)
    assert tokens - 2 <= samples[itl + "_count", ()] <= tokens
    assert samples[itl + '_bucket', (("le", "+Inf"),)] == samples[itl + "_count", ()]
    prometheus = pytest.importorskip("prometheus_client.parser")
    names = {family.name for family in prometheus.text_string_to_metric_families(answer.text)}
    assert {"glassformer_requests", ttft, itl, "glassformer_rows_in_use"} <= names
    assert json.loads(httpx.get(server.url + "/health").text) == {"status": "ok"}
