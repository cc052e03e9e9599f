"""`glassformer serve`'s refusals, in process and before any port opens: one line, exit 2."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import glassformer.serve.run as serve_run
from glassformer.cli import main
from glassformer.io.pretrained import save_pretrained
from glassformer.errors import GlassformerError
from glassformer.serve.rows import RowCache
from tests.serve.serve_models import (  # the repository root is on sys.path
    tiny_chat_model, tiny_mla_chat_model)

ROOT = Path(__file__).resolve().parents[2]


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


HOSTILE_S = 10.0         # each hostile size is refused within this
PEAK_BYTES = 2 ** 30     # and under this peak memory, before any cache exists
KILL_S = 60.0            # a command still running then has started a server: a failure


# Run by a small launcher: a child forked from pytest itself would report pytest's own peak
# (Linux carries the parent's resident size at fork into the child's ru_maxrss), so the launcher
# (a bare interpreter) runs the command and prints its only child's peak, in KiB.
LAUNCHER = ("import resource, subprocess, sys; "
            "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def refusal(*argv: str) -> tuple[str, float, int]:
    """A `glassformer serve` process: (its stderr, seconds, peak resident bytes)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-m", "glassformer",
                           "serve", "--port", "0", *argv], capture_output=True, text=True,
                          env=env, timeout=KILL_S)
    assert done.returncode == 2, done.stderr
    return done.stderr, time.perf_counter() - start, int(done.stdout) * 1024


@pytest.mark.parametrize("flags", [["--max-batch", "1000000000"],
                                   ["--max-batch", str(10 ** 30)],
                                   ["--max-batch", "1000000", "--context", "1000000000"],
                                   ["--huge-context"]])
def test_a_hostile_size_is_one_line_before_any_allocation(folder, tmp_path, flags):
    """Rows x context past half the machine's memory (or a config whose context is 10^9 with
    the default 8 rows) is refused in one line, in seconds and well under 1 GiB: the rows are
    budgeted (RowCache.bytes_for) before they exist."""
    if flags == ["--huge-context"]:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config["max_position_embeddings"] = 10 ** 9
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        flags = []
    err, seconds, peak = refusal("--model", str(folder), *flags)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert seconds < HOSTILE_S and peak < PEAK_BYTES
