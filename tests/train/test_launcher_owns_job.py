"""Issue 32: `train --workers 2` owns its MPI job. Whatever ends the top-level process (SIGKILL,
SIGTERM, SIGHUP, `timeout`), or its mpiexec, no process of the job is alive STOP_WITHIN_S later,
the run's lock is free and --resume continues; SIGTERM and SIGHUP checkpoint and say how to
resume, as Ctrl-C does. Errors from the ranks reach stderr as clean text (no NUL byte)."""
import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glassformer.cli import launch, main
from glassformer.io.checkpoint import load_checkpoint
from glassformer.train.runs.signals import StopRequest

pytest.importorskip("mpi4py", reason="mpi4py is not installed")
SHAKESPEARE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare.txt"
TINY_FLAGS = ["--n-layer", "1", "--n-head", "2", "--d-model", "16", "--block-size", "16",
              "--batch-size", "4", "--eval-iters", "2", "--warmup-iters", "2",
              "--lr-decay-iters", "40", "--eval-interval", "100000", "--no-progress"]
STOP_WITHIN_S = 10.0   # the bound: every process of the job gone this long after
START_WITHIN_S = 60.0  # two ranks start and write their first checkpoint (a loaded machine)


def glassformer(*args) -> list[str]:
    return [sys.executable, "-m", "glassformer", "train", *args]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not SHAKESPEARE.is_file():
        pytest.skip(f"corpus {SHAKESPEARE} is absent")
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    return path


def job_pids(out: Path) -> list[int]:
    """Live processes whose command line names the run folder: mpiexec and the ranks (Linux
    /proc; a zombie's command line is empty)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(out).encode() in cmdline.read_bytes().split(b"\0"):
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in pids if pid != os.getpid()]


def start_job(corpus, out: Path, prefix=()) -> subprocess.Popen:
    """`[prefix] glassformer train --workers 2` until its first checkpoint is written."""
    proc = subprocess.Popen([*prefix, *glassformer("--data", str(corpus), *TINY_FLAGS,
                                                   "--out", str(out), "--workers", "2",
                                                   "--max-iters", "100000")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + START_WITHIN_S
    while not (out / "latest").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert (out / "latest").exists(), "the job wrote no checkpoint"
    return proc


def assert_gone_and_resumable(out: Path, ended_at: float) -> None:
    """No process of the job within STOP_WITHIN_S, then a resume takes the lock and trains."""
    while job_pids(out) and time.time() - ended_at < STOP_WITHIN_S:
        time.sleep(0.1)
    assert job_pids(out) == [], "processes of the job outlived it"
    at = load_checkpoint(out).state["iter"]
    assert main(["train", "--out", str(out), "--resume", "--workers", "1",
                 "--max-iters", str(at + 2)]) == 0
    assert load_checkpoint(out).state["iter"] == at + 2


@pytest.mark.slow
def test_sigkill_of_the_launcher_ends_the_job(corpus, tmp_path):
    out = tmp_path / "run"
    proc = start_job(corpus, out)
    proc.kill()
    proc.communicate(timeout=STOP_WITHIN_S)
    assert_gone_and_resumable(out, time.time())


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_checkpoint_and_say_how_to_resume(corpus, tmp_path, signum, status):
    out = tmp_path / "run"
    proc = start_job(corpus, out)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=STOP_WITHIN_S)
    ended_at = time.time()
    assert proc.returncode == status, err
    name = signal.Signals(signum).name
    stopped = [line for line in err.splitlines() if f"stopped by {name} at iteration" in line]
    assert len(stopped) == 1 and "--resume" in stopped[0], err
    assert "error" not in err and "Traceback" not in err, err
    at = int(stopped[0].split("iteration ")[1].split(";")[0])
    assert load_checkpoint(out).state["iter"] == at
    assert_gone_and_resumable(out, ended_at)


@pytest.mark.slow
def test_timeout_leaves_nothing_behind(corpus, tmp_path):
    """`timeout 600 glassformer train ...` whose time is up: SIGALRM is what timeout's own clock
    sends it, so this is its real path (SIGTERM to the command, then to its group), at a moment
    the test chooses."""
    out = tmp_path / "run"
    proc = start_job(corpus, out, prefix=["timeout", "600"])
    proc.send_signal(signal.SIGALRM)
    _, err = proc.communicate(timeout=STOP_WITHIN_S)
    assert proc.returncode == 124, err   # timeout's own status: the time was up
    assert "stopped by SIGTERM at iteration" in err and "Traceback" not in err, err
    assert_gone_and_resumable(out, time.time())


@pytest.mark.slow
def test_ranks_end_when_their_mpiexec_is_killed(corpus, tmp_path):
    out = tmp_path / "run"
    proc = start_job(corpus, out)
    mpiexec = [pid for pid in job_pids(out) if os.getppid() != pid and
               Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[1]
               == str(proc.pid)]
    assert len(mpiexec) == 1
    os.kill(mpiexec[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=STOP_WITHIN_S)
    err_lines = [line for line in err.splitlines() if "error" in line]
    assert len(err_lines) == 1 and "killed by SIGKILL" in err_lines[0], err
    assert_gone_and_resumable(out, time.time())


def test_rank_errors_are_clean_text():
    """mpiexec ends its framed blocks with a NUL byte: the relay drops it."""
    read, write = os.pipe()
    os.write(write, b"iter 0\n" + b"-" * 40 + b"\nabort\n" + b"-" * 40 + b"\n\0")
    os.close(write)
    relay = launch._Relay()
    with open(read, "rb") as pipe, contextlib.redirect_stderr(io.StringIO()) as err:
        relay.feed(pipe)
    assert err.getvalue() == "iter 0\n" and relay.frames == [" abort"]


def test_an_echo_of_the_same_signal_is_one_request():
    stop = StopRequest()
    stop.on_signal(signal.SIGTERM, None)
    stop.on_signal(signal.SIGTERM, None)   # timeout's second SIGTERM, to the group
    assert stop() and stop.signal_name == "SIGTERM"
    with pytest.raises(KeyboardInterrupt):
        stop.on_signal(signal.SIGINT, None)   # another signal: quit now


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_child_gets_its_signal_when_the_parent_dies(tmp_path):
    """A parent that starts `sleep` with die_with_parent, then is killed by SIGKILL: the sleep
    ends with it."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import os, signal, subprocess, sys, time
from functools import partial
from glassformer.train.runs.signals import die_with_parent
child = subprocess.Popen(["sleep", "60"],
                         preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
open({str(pid_file)!r}, "w").write(str(child.pid))
time.sleep(60)
"""])
    deadline = time.time() + START_WITHIN_S
    while not pid_file.exists() or not pid_file.read_text() and time.time() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    killed_at = time.time()
    while Path(f"/proc/{child}/cmdline").exists() and \
            Path(f"/proc/{child}/cmdline").read_bytes() and time.time() - killed_at < 5:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}/cmdline").exists() or \
        not Path(f"/proc/{child}/cmdline").read_bytes()
