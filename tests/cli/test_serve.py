"""`glassformer serve`'s refusals, in process and before any port opens: one line, exit 2."""
import socket
import sys

import pytest

import glassformer.serve.run as serve_run
from glassformer.cli import main
from glassformer.io.pretrained import save_pretrained
from glassformer.errors import GlassformerError
from glassformer.serve.rows import RowCache
from tests.serve.serve_models import (  # the repository root is on sys.path
    tiny_chat_model, tiny_mla_chat_model)


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


def test_an_mla_cache_is_budgeted_by_its_latent_bytes(monkeypatch):
    """The latent cache of 4 rows x 64 positions: 2 layers x (R 8 + Dr 4) float32s a position,
    not the 2 H D floats per head of ordinary attention; the rows' budget adds each position's
    mask and id (1 + 8 bytes) and doubles it all for a prefill of every row at once."""
    model = tiny_mla_chat_model(max_seq_len=64)
    latent = 4 * 64 * 2 * (8 + 4) * 4
    assert model.cache_bytes(4, 64) == latent
    budget = 2 * (latent + 4 * 64 * (1 + 8))
    assert RowCache.bytes_for(model, 4, 64) == budget
    monkeypatch.setattr(serve_run, "memory_budget", lambda: budget)
    engine = serve_run.make_engine(model, max_batch=4, max_queue=8, context=None)
    assert sum(a.nbytes for a in engine.rows.cache.k + engine.rows.cache.v) == latent
    assert engine.rows.live.nbytes + engine.rows.ids.nbytes == 4 * 64 * (1 + 8)
    monkeypatch.setattr(serve_run, "memory_budget", lambda: budget - 1)
    with pytest.raises(GlassformerError, match="lower --max-batch or --context"):
        serve_run.make_engine(model, max_batch=4, max_queue=8, context=None)


def test_an_mla_cache_past_the_budget_is_one_line(tmp_path, capsys, monkeypatch):
    save_pretrained(tiny_mla_chat_model(max_seq_len=64), tmp_path / "mla")
    monkeypatch.setattr(serve_run, "memory_budget", lambda: 1024)
    assert main(["serve", "--model", str(tmp_path / "mla"), "--max-batch", "4"]) == 2
    err = capsys.readouterr().err
    assert "lower --max-batch or --context" in err and len(err.strip().splitlines()) == 1


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
