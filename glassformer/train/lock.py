"""One writer per run folder: an OS lock on `<run>/lock`, held for as long as a training runs.

Two trainers writing one run folder delete each other's checkpoints and can leave `latest` naming
a deleted folder. So every process that writes a run (a new run, a resume, a fine-tune) first
takes an exclusive `fcntl.flock` on the folder's lock file and keeps it until it ends:

    with hold_run_folder(out):      # the second process gets a GlassformerError at once,
        ...train, save...           # naming the pid that holds the folder

The kernel drops the lock when the holder's file is closed, which includes any death of the
process (`kill -9` too), so a stale lock cannot exist and there is nothing to clean up: the file
itself stays in the folder and is reused. Readers (generate, eval, a loading library call) take
no lock; they see whole checkpoints because a save only ever renames a complete folder into
`latest`.

note: flock locks belong to the open file, so a process forked while holding it shares it;
worker processes started by a trainer are its helpers, not second writers.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

from glassformer.errors import GlassformerError

LOCK_NAME = "lock"
PID_WAIT_S = 1.0  # how long to wait for a holder that has the lock but has not yet written its pid


def _holder_pid(fd: int) -> str:
    """The pid the holder wrote into the lock file ("unknown" if it has not written it yet)."""
    deadline = time.monotonic() + PID_WAIT_S
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit() or time.monotonic() > deadline:
            return text if text.isdigit() else "unknown"
        time.sleep(0.05)


@contextlib.contextmanager
def hold_run_folder(run_dir: str | os.PathLike) -> Iterator[Path]:
    """Create `run_dir` if needed and hold its lock for the duration of the `with` block.

    Raises GlassformerError naming the holder's pid when another process holds it.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GlassformerError(
                f"{run_dir} is being written by another training process (pid "
                f"{_holder_pid(fd)}); wait for it to finish or stop it, or choose another "
                "--out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield run_dir
    finally:
        os.close(fd)  # releases the lock
