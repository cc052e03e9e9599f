"""Ctrl-C and SIGTERM during training: the first asks the loop to stop, the second quits.

    with stop_on_signals() as stop:          # installs handlers for SIGINT and SIGTERM
        train(..., should_stop=stop)         # the loop checks stop() once per iteration,
                                             # checkpoints that iteration and returns
    if stop.signal_name: ...                 # say how to resume

The first signal only sets a flag, so the optimizer step in progress finishes and the checkpoint
holds a consistent iteration. A second signal raises KeyboardInterrupt wherever the program is,
so it exits without saving (an interrupted save leaves the previous checkpoint as `latest`: saves
are atomic). Handlers can only be installed from the main thread; library callers that train in
another thread pass their own should_stop.
"""
from __future__ import annotations

import contextlib
import signal
import sys
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """A callable flag: stop() is True once a stop signal arrived; signal_name says which."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def __call__(self) -> bool:
        return self.signal_name is not None

    def on_signal(self, signum: int, frame) -> None:
        if self.signal_name is not None:
            raise KeyboardInterrupt  # the second one: quit now, no checkpoint
        self.signal_name = signal.Signals(signum).name
        print(f"\n{self.signal_name}: saving a checkpoint after this iteration "
              "(press Ctrl-C again to quit without saving)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Route SIGINT and SIGTERM to a StopRequest while the block runs; restore them after."""
    request = StopRequest()
    previous = {sig: signal.signal(sig, request.on_signal) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
