"""The run folder's lock: one writer per run folder, held as an OS lock on the folder itself.

Two trainers writing one run folder delete each other's checkpoints and can leave `latest` naming
a deleted folder. So every process that writes a run takes an exclusive `fcntl.flock` on the run
folder (a directory opened read-only: Linux and macOS lock it as they lock a file) and keeps the
descriptor open until it ends (runs/folder.py's hold_run_folder).

    lock_folder(run)   -> fd holding the lock; GlassformerError naming the holder's pid

Why the folder and not a file in it (issue 49): a flock belongs to the open file, not to its
name. Before, the lock was on `RUN/lock`; deleting that file (a common habit with "stale locks")
let a second writer create a new `lock` and lock it while the first still held the deleted one.
Nothing a user does to clear a lock removes the folder's own inode while the run is in it.
`RUN/lock` is now only a note: the holder writes its pid there for people, and for systems
without /proc/locks. The refusal takes the pid from /proc/locks first, by the folder's inode, so
it names the holder even after `lock` was deleted.

The kernel drops the lock when the holder's descriptor is closed, which includes any death of
the process (`kill -9` too), so a stale lock cannot exist and there is nothing to clean up.

note: a filesystem that cannot lock a directory (NFS emulates flock with byte-range locks, which
need a file open for writing) gets the lock on `RUN/lock` instead, as before issue 49; there,
deleting that file does free the folder, so leave it.
note: flock locks belong to the open file, so a process forked while holding it shares it;
worker processes started by a trainer are its helpers, not second writers.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from glassformer.errors import GlassformerError

LOCK_NAME = "lock"  # RUN/lock: the holder's pid (the lock itself where a folder cannot be locked)
PID_WAIT_S = 1.0  # how long to wait for a holder that has the lock but has not yet written its pid
PROC_LOCKS = Path("/proc/locks")  # Linux: every lock, with its holder's pid and inode


def lock_folder(run_dir: Path) -> int:
    """A descriptor holding the exclusive flock on `run_dir` (or, where the filesystem cannot
    lock a directory, on `run_dir/lock`); one line naming the holder if another process has it."""
    fd = os.open(run_dir, os.O_RDONLY)
    if _try_flock(fd, run_dir):
        return fd
    os.close(fd)   # the filesystem cannot lock a directory: the lock file, as before issue 49
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if _try_flock(fd, path):
        return fd
    os.close(fd)
    raise GlassformerError(f"cannot lock {run_dir}: its filesystem supports no flock; train "
                           "into a folder on a local disk")


def _try_flock(fd: int, path: Path) -> bool:
    """True once `fd` holds the exclusive lock; False if this filesystem cannot lock it;
    GlassformerError if another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        run_dir = path if path.is_dir() else path.parent
        os.close(fd)
        raise GlassformerError(
            f"{run_dir} is being written by another training process (pid "
            f"{_holder_pid(path)}); wait for it to finish or stop it, or choose another "
            "--out") from None
    except OSError:
        return False


def _holder_pid(locked: Path) -> str:
    """The pid holding the flock on `locked`: from /proc/locks (by inode, so it survives a
    deleted `lock` file), else what the holder wrote into RUN/lock, else "unknown"."""
    pid = _pid_in_proc_locks(locked)
    if pid:
        return pid
    note = (locked if locked.is_file() else locked / LOCK_NAME)
    deadline = time.monotonic() + PID_WAIT_S
    while True:  # the holder may have the lock and not yet have written its pid
        try:
            text = note.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return "unknown"
        if text.isdigit() or time.monotonic() > deadline:
            return text if text.isdigit() else "unknown"
        time.sleep(0.05)


def _pid_in_proc_locks(locked: Path) -> str | None:
    """The pid of the FLOCK write lock on `locked`'s inode in /proc/locks, lines such as
    `1: FLOCK  ADVISORY  WRITE 15011 fe:00:2163041 0 EOF`; None where there is no such file
    or line (another OS, a pid namespace that hides the holder: pid 0)."""
    try:
        st = os.stat(locked)
        lines = PROC_LOCKS.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    same_inode = []   # (same device, pid): some filesystems show another device number there
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue   # a waiter's line has "->" in fields[1]
        dev, _, inode = fields[5].rpartition(":")
        if inode == str(st.st_ino) and fields[4].isdigit() and fields[4] != "0":
            same_inode.append((dev == device, fields[4]))
    if len(same_inode) == 1 or any(same for same, _ in same_inode):
        return max(same_inode)[1]
    return None
