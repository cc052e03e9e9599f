"""A tqdm progress bar fed by the training loop's log records (stderr, so stdout stays clean)."""
from __future__ import annotations

import contextlib
import sys

from tqdm import tqdm


class TrainProgress:
    """start(max_iters, start_iter) once the run's length is known (a resume learns it from the
    checkpoint); then each log record advances the bar and shows loss, val loss and it/s."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None
        self.shown: dict[str, str] = {}

    def start(self, total: int, done: int) -> None:
        self.bar = tqdm(total=total, initial=done, disable=not self.enabled, file=sys.stderr,
                        unit="it", dynamic_ncols=True)

    def on_step(self, record: dict) -> None:
        if "train_loss" in record:
            self.shown["loss"] = f"{record['train_loss']:.4f}"
            self.bar.update(record["iter"] + 1 - self.bar.n)
        if "val_loss" in record:
            self.shown["val"] = f"{record['val_loss']:.4f}"
            bpb = f" ({record['val_bpb']:.3f} bits/byte)" if "val_bpb" in record else ""
            if not self.enabled:
                print(f"iter {record['iter']}: train {record['eval_train_loss']:.4f}, "
                      f"val {record['val_loss']:.4f}{bpb}", file=sys.stderr)
        self.bar.set_postfix(self.shown, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def progress_printer(enabled: bool = True):
    """Yields a TrainProgress and closes its bar at the end."""
    progress = TrainProgress(enabled)
    try:
        yield progress
    finally:
        progress.close()
