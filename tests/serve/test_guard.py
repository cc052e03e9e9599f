"""The app's last word (serve/guard.py, faults.py) and its body limits (serve/body.py), in
process: an exception no route expected is OpenAI's error shape (400 for a GlassformerError, 503
out of memory, 500 for a server fault) and one log line, never a traceback, as is a fault in the
engine's thread; the nesting depth counts brackets outside strings only."""
import json
import threading

import numpy as np
import pytest
from serve_models import tiny_chat_model
from starlette.testclient import TestClient

from glassformer.errors import GlassformerError
from glassformer.generate.sampling import Sampling
from glassformer.serve.app import RequestLog, Served, create_app
from glassformer.serve.body import MAX_DEPTH, nesting_depth, parse_body
from glassformer.serve.engine import Engine
from glassformer.serve.prefill import Prefill
from glassformer.serve.protocol import ApiError
from glassformer.serve.sequence import Finished, Sequence, Settings

WAIT_S = 30.0   # generous: the 2-core test machine is shared


class Raising:
    """A tokenizer whose encode raises `error`: a fault where no route expects one."""

    def __init__(self, tokenizer, error: BaseException):
        self.tokenizer, self.error = tokenizer, error

    def encode(self, text):
        raise self.error

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def answer_with(error: BaseException, capsys):
    model = tiny_chat_model(max_seq_len=32)
    model.tokenizer = Raising(model.tokenizer, error)
    client = TestClient(RequestLog(create_app(Served(model, "tiny"))),
                        raise_server_exceptions=False)
    capsys.readouterr()
    answer = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    return answer, capsys.readouterr().err


@pytest.mark.parametrize("error, status, words", [
    (ZeroDivisionError("division by zero"), 500, "server fault: ZeroDivisionError"),
    (KeyError("missing"), 500, "server fault: KeyError"),
    (MemoryError(), 503, "out of memory: MemoryError"),
    (GlassformerError("this text cannot be read"), 400, "this text cannot be read"),
])
def test_an_unexpected_error_is_openais_shape_and_one_log_line(capsys, error, status, words):
    answer, log = answer_with(error, capsys)
    assert answer.status_code == status
    body = answer.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    assert body["type"] == ("invalid_request_error" if status == 400 else "server_error")
    assert "Traceback" not in log and "Exception in ASGI" not in log
    lines = log.strip().splitlines()
    assert len(lines) == 1 and f"  {status}  " in lines[0] and words in lines[0]
    if status == 500:   # the line says where; the client's body does not
        assert "in encode)" in lines[0] and "encode" not in body["message"]


def test_depth_counts_brackets_outside_strings():
    assert nesting_depth(json.dumps({"a": [[{"b": [1]}]]}).encode()) == 5
    quoted = json.dumps({"s": "[" * 100 + '\\"' + "{" * 100, "t": [[["]]]"]]]}).encode()
    assert nesting_depth(quoted) == 4
    escaped = json.dumps({"s": "\\" * 7 + '"' + "[" * 100, "t": [[]]}).encode()
    assert nesting_depth(escaped) == 3


def test_depth_agrees_with_the_parsed_object_on_random_bodies():
    rng = np.random.default_rng(0)
    leaves = ['a"[{\\', "\\\\[", "x]}", 1, '"""', '\\"[[', "]]]]", "[[[["]
    for _ in range(200):
        depth = int(rng.integers(MAX_DEPTH - 5, MAX_DEPTH + 5))
        value = leaves[int(rng.integers(len(leaves)))]
        for _ in range(depth):
            extra = leaves[int(rng.integers(len(leaves)))]
            value = [value, extra] if rng.random() < 0.5 else {"k[\\\"": value, "z": extra}
        assert nesting_depth(json.dumps(value).encode()) == depth


@pytest.mark.parametrize("raw, code", [
    (b"[" * 10_000 + b"]" * 10_000, "nesting_too_deep"),
    ("[".encode("utf-16") * 5_000, "nesting_too_deep"),
    (b'{"n": ' + b"7" * 100_000 + b"}", "number_too_long"),
    (b'{"n": 1.' + b"7" * 100_000 + b"}", "number_too_long"),
    (b"{not json", "invalid_json"),
    (b"\xff\xfe\x00", "invalid_json"),
    (b"[1, 2]", "invalid_json"),
])
def test_a_hostile_body_is_a_400(raw, code):
    with pytest.raises(ApiError) as caught:
        parse_body(raw)
    assert caught.value.status == 400 and caught.value.code == code


def test_a_body_at_the_limits_is_read():
    deep = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert parse_body(f'{{"a": {deep}, "n": {"9" * 100}}}'.encode())["n"] == int("9" * 100)


def test_an_engine_fault_is_one_line_and_an_error_for_each_reply(capsys, monkeypatch):
    """A fault inside the engine's step: one log line naming it and where, each reply in flight
    finished with "error" (the client's 500), and the engine goes on serving."""
    model = tiny_chat_model(max_seq_len=32)
    engine = Engine(model, max_batch=2, max_queue=4, max_len=32)
    real_feed = Prefill.feed

    def broken_prefill(*args, **kwargs):
        monkeypatch.setattr(Prefill, "feed", real_feed)   # only the first prefill fails
        return {}["missing"]

    monkeypatch.setattr(Prefill, "feed", broken_prefill)
    finished = []
    settings = Settings(4, Sampling(temperature=0.0), None, (), None)
    done = threading.Event()

    def on_event(event):
        if isinstance(event, Finished):
            finished.append(event.reason)
            done.set()

    engine.start()
    try:
        for _ in range(2):
            done.clear()
            engine.submit([Sequence(0, model.tokenizer.encode("hi"), settings, frozenset(),
                                    model.tokenizer, on_event)])
            assert done.wait(WAIT_S)
    finally:
        engine.stop()
    assert finished == ["error", "length"]
    log = capsys.readouterr().err.strip().splitlines()
    assert len(log) == 1 and "engine fault: KeyError: 'missing' (at " in log[0]
    assert "in broken_prefill)" in log[0] and "Traceback" not in log[0]
