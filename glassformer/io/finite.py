"""Every weight a loader reads is finite, checked once at load.

A NaN or an infinity in one weight spreads through every later layer: the logits come out NaN,
sampling picks id 0 or nothing, and the command ends with status 0 and an empty text. A file
written by a diverged training run, a bad conversion or a flipped byte (4 KB of 0xFF inside a
GGUF block makes its float16 scales NaN) looks like any other file until then. So each tensor is
checked as it is read, once (one np.isfinite pass, a bool temporary of the tensor's size), and
the first bad one is one CheckpointError line naming the file, the tensor and where.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import CheckpointError


def check_finite(where, name: str, array: np.ndarray) -> None:
    """Raise a CheckpointError naming `name` in `where` unless every value of `array` is finite
    (integer arrays always are)."""
    array = np.asarray(array)
    if array.dtype.kind not in "fc":
        return
    finite = np.isfinite(array)                          # same shape, bool
    if finite.all():
        return
    bad = int(finite.size - np.count_nonzero(finite))
    first = tuple(int(i) for i in np.argwhere(~finite)[0])
    value = array[first]
    raise CheckpointError(f"{where}: tensor {name!r} holds {bad:,} non-finite value(s) (the "
                          f"first, {value}, at index {first}); a model with NaN or infinite "
                          "weights computes only NaN, so it is refused")
