"""`glassformer serve` never answers 500 to a client (issue 49): a real server process on a tiny
model takes a 10,000-deep nested body, a 100,000-digit `max_tokens` and 32 clients that leave
while uploading their bodies; each hostile request is a 400 naming the limit or a quiet line in
the log, none takes 10 s, the server's peak memory stays under 1 GiB, its log has no traceback
and no status 500, and it then answers a normal chat completion."""
import json
import re
import socket
import time

import httpx
import pytest
from serve_process import start_server
from serve_models import save_chat_model

from glassformer.serve.body import MAX_DEPTH, MAX_NUMBER_CHARS

HOSTILE_S = 10.0            # each hostile case answers within this
PEAK_BYTES = 2 ** 30        # the server's peak resident memory stays under this
CLIENT_TIMEOUT_S = 60.0
LEAVERS = 32                # clients that close mid-upload
LOG_WAIT_S = 30.0           # bounded wait for the server to log every leaver
DEEP = 10_000
DIGITS = 100_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = save_chat_model(tmp_path_factory.mktemp("tiny") / "tinychat")
    running = start_server(folder, tmp_path_factory.mktemp("log"), "--max-batch", "2")
    yield running
    assert running.stop() == 0


def server_address(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def post(server, route: str, body: bytes) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    answer = httpx.post(server.url + route, content=body, timeout=CLIENT_TIMEOUT_S,
                        headers={"Content-Type": "application/json"})
    return answer, time.perf_counter() - start


def refused(answer: httpx.Response, seconds: float, code: str, limit: int) -> None:
    assert seconds < HOSTILE_S
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert f"at most {limit}" in error["message"] and "\n" not in error["message"]


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions",
                                   "/v1/embeddings"])
def test_a_10000_deep_body_is_a_400_naming_the_depth(server, route):
    bare = b"[" * DEEP + b"]" * DEEP
    refused(*post(server, route, bare), "nesting_too_deep", MAX_DEPTH)
    inside = json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": "X"})
    inside = inside.replace('"X"', "[" * DEEP + "]" * DEEP).encode()
    refused(*post(server, route, inside), "nesting_too_deep", MAX_DEPTH)


def test_brackets_inside_strings_do_not_count(server):
    text = '\\"' + "[" * 100 + "{" * 100
    answer, _ = post(server, "/v1/completions", json.dumps(
        {"prompt": text, "max_tokens": 2, "temperature": 0}).encode())
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("number", ["9" * DIGITS, "-" + "1" * DIGITS, "0." + "5" * DIGITS,
                                    "1" * DIGITS + "e5"])
def test_a_100000_digit_number_is_a_400_naming_the_limit(server, number):
    body = b'{"prompt": "hi", "max_tokens": ' + number.encode() + b"}"
    refused(*post(server, "/v1/completions", body), "number_too_long", MAX_NUMBER_CHARS)


def test_a_content_length_of_5000_digits_is_refused(server):
    with socket.create_connection(server_address(server), timeout=CLIENT_TIMEOUT_S) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     + b"9" * 5000 + b"\r\n\r\n{}")
        head = conn.recv(4096)
    assert re.match(rb"HTTP/1\.1 4\d\d ", head), head[:80]


def test_32_clients_that_leave_mid_upload_end_quietly(server):
    before = server.log_text().count("the client left before sending its whole body")
    start = time.perf_counter()
    conns = []
    for k in range(LEAVERS):    # all open at once, each promising more than it sends
        conn = socket.create_connection(server_address(server), timeout=CLIENT_TIMEOUT_S)
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                     + b'{"messages": [{"role": "user", "content": "' + b"x" * (k * 100))
        conns.append(conn)
    for conn in conns:
        conn.close()
    deadline = time.monotonic() + LOG_WAIT_S
    while time.monotonic() < deadline:
        left = server.log_text().count("the client left before sending its whole body")
        if left - before == LEAVERS:
            break
        time.sleep(0.1)
    assert left - before == LEAVERS
    assert time.perf_counter() - start < HOSTILE_S


def test_then_a_normal_chat_completion_no_500_no_traceback_under_1_gib(server):
    """Runs last in this file: the whole log so far, and the peak memory of every case."""
    answer = httpx.post(server.url + "/v1/chat/completions", timeout=CLIENT_TIMEOUT_S, json={
        "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 4
    log = server.log_text()
    assert "Traceback" not in log and "Exception in ASGI" not in log
    statuses = re.findall(r"^glassformer serve: \S+  \S+ \S+  (\S+)", log, re.MULTILINE)
    assert statuses and "500" not in statuses
    assert server.peak_bytes() < PEAK_BYTES
