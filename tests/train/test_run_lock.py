"""The run folder's lock holds (issue 49): deleting `RUN/lock` under a running `train` does not let
a second writer in; the second is refused in one line naming the holder's pid, and the first
finishes with its log intact. `finetune` takes the same lock."""
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys

import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import load_checkpoint
from glassformer.train.runs import lock
from glassformer.train.runs.folder import hold_run_folder

from tests.train.test_finetune import FAST, base, chat_file  # noqa: F401 - base is a fixture
from tests.train.test_runs import SECOND_TRAINER_EXITS_S, trainer, wait_for

ITERS = 200


def strict_rows(run_dir):
    """Every line of the run's log, parsed by a strict JSON parser (no NaN, no Infinity)."""
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")
    lines = (run_dir / "train_log.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line, parse_constant=refuse) for line in lines]


def test_deleting_the_lock_file_under_a_running_train_lets_no_second_writer_in(corpus,
                                                                                 tmp_path):
    out = tmp_path / "run"
    first = trainer(corpus, out, "--max-iters", str(ITERS), "--eval-interval", "20")
    try:
        wait_for(lambda: (out / "latest").is_file())
        first.send_signal(signal.SIGSTOP)  # paused, still holding the folder: no race with its end
        assert (out / "lock").read_text().strip() == str(first.pid)  # the note
        (out / "lock").unlink()                    # the "stale lock" habit
        try:
            second = subprocess.run(
                [sys.executable, "-m", "glassformer", "train", "--out", str(out), "--resume",
                 "--max-iters", "5", "--no-progress"],
                capture_output=True, text=True, timeout=SECOND_TRAINER_EXITS_S)
        finally:
            first.send_signal(signal.SIGCONT)
        assert second.returncode == 2
        assert second.stderr.count("\n") == 1 and f"(pid {first.pid})" in second.stderr
        _, err = first.communicate(timeout=180)
    finally:
        first.kill()
    assert first.returncode == 0, err
    rows = strict_rows(out)
    assert [r["iter"] for r in rows if "train_loss" in r] == list(range(ITERS))  # in order, once
    assert load_checkpoint(out).state["iter"] == ITERS


def test_the_lock_is_on_the_folder_not_on_its_lock_file(tmp_path):
    out = tmp_path / "run"
    with hold_run_folder(out):
        assert (out / "lock").read_text() == f"{os.getpid()}\n"
        (out / "lock").unlink()
        with pytest.raises(GlassformerError, match=rf"\(pid {os.getpid()}\)"):
            with hold_run_folder(out):
                pass
        assert not (out / "lock").exists()  # the refused one wrote nothing
    with hold_run_folder(out):               # released at the end of the block
        pass


def test_a_filesystem_that_cannot_lock_a_folder_locks_the_file(tmp_path, monkeypatch):
    real_flock = fcntl.flock

    def no_folder_locks(fd, operation):      # NFS: a directory opened read-only cannot be locked
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EBADF, "Bad file descriptor")
        return real_flock(fd, operation)
    monkeypatch.setattr(fcntl, "flock", no_folder_locks)
    out = tmp_path / "run"
    with hold_run_folder(out):
        with pytest.raises(GlassformerError, match=rf"\(pid {os.getpid()}\)"):
            with hold_run_folder(out):
                pass


def test_the_holder_is_found_in_proc_locks_by_inode(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    st = os.stat(folder)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    table = tmp_path / "locks"
    monkeypatch.setattr(lock, "PROC_LOCKS", table)
    table.write_text(f"1: POSIX  ADVISORY  WRITE 11 {dev}:{st.st_ino} 0 EOF\n"
                     f"2: FLOCK  ADVISORY  WRITE 4242 {dev}:{st.st_ino} 0 EOF\n"
                     f"2: -> FLOCK  ADVISORY  WRITE 99 {dev}:{st.st_ino} 0 EOF\n"
                     f"3: FLOCK  ADVISORY  WRITE 77 {dev}:{st.st_ino + 1} 0 EOF\n")
    assert lock._holder_pid(folder) == "4242"
    table.write_text(f"1: FLOCK  ADVISORY  WRITE 0 {dev}:{st.st_ino} 0 EOF\n")  # hidden holder
    (folder / "lock").write_text("31337\n")
    assert lock._holder_pid(folder) == "31337"                  # the note, then
    (folder / "lock").unlink()
    assert lock._holder_pid(folder) == "unknown"


def test_finetune_new_and_resumed_takes_the_same_lock(base, tmp_path, capsys):  # noqa: F811
    data, run = chat_file(tmp_path / "chat.jsonl"), tmp_path / "run"
    with hold_run_folder(run):
        (run / "lock").unlink()
        assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(run),
                     *FAST]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"(pid {os.getpid()})" in err
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(run),
                 *FAST, "--max-iters", "2"]) == 0
    capsys.readouterr()
    with hold_run_folder(run):
        (run / "lock").unlink()
        assert main(["finetune", "--out", str(run), "--resume", "--max-iters", "4",
                     "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"(pid {os.getpid()})" in err
    assert load_checkpoint(run).state["iter"] == 2
