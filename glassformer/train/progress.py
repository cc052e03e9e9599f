"""A tqdm progress bar fed by the training loop's log records (stderr, so stdout stays clean)."""
from __future__ import annotations

import contextlib
import sys

from tqdm import tqdm


@contextlib.contextmanager
def progress_printer(total: int, enabled: bool = True):
    """Yields on_step(record): advances the bar, shows loss, val loss and it/s."""
    bar = tqdm(total=total, disable=not enabled, file=sys.stderr, unit="it", dynamic_ncols=True)
    shown = {}

    def on_step(record: dict) -> None:
        if "train_loss" in record:
            shown["loss"] = f"{record['train_loss']:.4f}"
            bar.update(record["iter"] + 1 - bar.n)
        if "val_loss" in record:
            shown["val"] = f"{record['val_loss']:.4f}"
            if not enabled:
                print(f"iter {record['iter']}: train {record['eval_train_loss']:.4f}, "
                      f"val {record['val_loss']:.4f}", file=sys.stderr)
        bar.set_postfix(shown, refresh=False)

    try:
        yield on_step
    finally:
        bar.close()
