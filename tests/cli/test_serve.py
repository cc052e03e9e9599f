"""`glassformer serve`'s refusals, in process and before any port opens: one line, exit 2."""
import socket
import sys

import pytest

import glassformer.serve.run as serve_run
from glassformer.cli import main
from glassformer.io.pretrained import save_pretrained
from tests.serve.serve_models import tiny_chat_model  # the repository root is on sys.path


@pytest.fixture
def folder(tmp_path):
    save_pretrained(tiny_chat_model(max_seq_len=64), tmp_path / "m")
    return tmp_path / "m"


@pytest.mark.parametrize("flags, words", [
    (["--port", "70000"], "--port must be in 0..65535"),
    (["--max-batch", "0"], "--max-batch must be at least 1"),
    (["--max-queue", "0"], "--max-queue must be at least 1"),
])
def test_bad_flags_are_one_line(folder, capsys, flags, words):
    assert main(["serve", "--model", str(folder), *flags]) == 2
    assert words in capsys.readouterr().err


def test_a_cache_past_the_memory_budget_is_refused(folder, capsys, monkeypatch):
    monkeypatch.setattr(serve_run, "memory_budget", lambda: 1024)
    assert main(["serve", "--model", str(folder), "--max-batch", "4"]) == 2
    assert "lower --max-batch or --context" in capsys.readouterr().err


def test_a_port_in_use_is_one_line(folder, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(folder), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_without_the_serve_extra_it_says_what_to_install(folder, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)      # import uvicorn raises ImportError
    assert main(["serve", "--model", str(folder)]) == 2
    assert "pip install 'glassformer[serve]'" in capsys.readouterr().err
