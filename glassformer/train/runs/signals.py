"""Ctrl-C, SIGTERM and SIGHUP during training: the first asks the loop to stop, the second quits;
and processes that end with the one that started them.

    with stop_on_signals() as stop:          # installs handlers for SIGINT, SIGTERM, SIGHUP
        train(..., should_stop=stop)         # the loop checks stop() once per iteration,
                                             # checkpoints that iteration and returns
    if stop.signal_name: ...                 # say how to resume

The first signal only sets a flag, so the optimizer step in progress finishes and the checkpoint
holds a consistent iteration. A second signal raises KeyboardInterrupt wherever the program is,
so it exits without saving (an interrupted save leaves the previous checkpoint as `latest`: saves
are atomic). SIGHUP is a closed terminal, SIGTERM a `kill` or `timeout`: both save, as Ctrl-C does.

subtle: `timeout` sends its signal twice, to the command and then to its process group, within
microseconds; a repeat of the same signal within REPEAT_S is that echo, not a second request.

Handlers can only be installed from the main thread; library callers that train in another thread
pass their own should_stop.

Processes that must not outlive their starter (issue 32: the MPI job of `train --workers N`):
`die_with_parent` runs in a child between fork and exec (Popen's preexec_fn) and asks Linux to
send it a signal when its parent dies (prctl PR_SET_PDEATHSIG), even by SIGKILL; `watch_parent`
is the portable form for a Python process: a thread that polls the parent's pid and ends this
process once it changed (the parent died, the child was handed to init).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from typing import Iterator

# SIGHUP does not exist on Windows
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))
REPEAT_S = 1.0          # the same signal again within this is an echo (see the docstring)
PR_SET_PDEATHSIG = 1    # linux/prctl.h
PARENT_POLL_S = 0.5     # how often watch_parent looks at the parent's pid


class StopRequest:
    """A callable flag: stop() is True once a stop signal arrived; signal_name says which."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.at = 0.0   # time.monotonic() of the first signal

    def __call__(self) -> bool:
        return self.signal_name is not None

    def on_signal(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None:
            if name == self.signal_name and time.monotonic() - self.at < REPEAT_S:
                return   # the echo of the first one (timeout)
            raise KeyboardInterrupt  # the second one: quit now, no checkpoint
        self.signal_name, self.at = name, time.monotonic()
        try:
            print(f"\n{self.signal_name}: saving a checkpoint after this iteration "
                  "(press Ctrl-C again to quit without saving)", file=sys.stderr, flush=True)
        except OSError:
            pass  # a closed terminal (SIGHUP): the checkpoint matters, not the notice


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Route SIGINT, SIGTERM and SIGHUP to a StopRequest while the block runs; restore them
    after."""
    request = StopRequest()
    previous = {sig: signal.signal(sig, request.on_signal) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def die_with_parent(signum: int, parent_pid: int) -> None:
    """In a child before exec: have the kernel send `signum` when the parent dies (Linux; a no-op
    elsewhere). `parent_pid` is the starter's pid, read before the fork: if it is already gone,
    the signal comes now.

    note: the kernel sends it when the parent's *thread* that forked ends, so the starter forks
    from its main thread (subprocess.Popen there)."""
    libc_name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or libc_name is None:
        return
    libc = ctypes.CDLL(libc_name, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if os.getppid() != parent_pid:   # the parent died between fork and prctl
        os.kill(os.getpid(), signum)


def watch_parent(poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """End this process with SIGKILL once its parent has died (a daemon thread polls getppid).

    What a rank of an MPI job runs: when its mpiexec dies (killed itself, or ended with the
    launcher), nothing else would stop it, and it would keep training and holding the run's lock.
    SIGKILL, not a checkpoint: its peers may be gone, so a collective could wait forever."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="watch_parent", daemon=True)
    thread.start()
    return thread
