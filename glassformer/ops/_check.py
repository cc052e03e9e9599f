"""Input checks shared by every op: dtype and shape, with errors in legend letters.

An op calls these at its entry point so that a wrong input fails with a message such as
``expected x of shape (B, T, C=768), got (4, 256, 512)`` instead of a NumPy broadcasting
traceback three calls deeper. `sizes` is a plain dict the caller owns: the first array binds each
letter to a size and later arrays must agree with it.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError, ShapeError
from glassformer.ops.quant.matrix import QuantizedMatrix

FLOAT_DTYPES = (np.float32, np.float64)


def check_float(name: str, x) -> np.ndarray:
    """Return `x` if it is a float32/float64 ndarray, else raise a clear error."""
    if not isinstance(x, np.ndarray):
        raise GlassformerError(
            f"expected {name} to be a NumPy array of float32 or float64, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise GlassformerError(
            f"expected {name} to have dtype float32 or float64, got {x.dtype}")
    return x


def check_weight(name: str, w) -> object:
    """Return `w` if it is a float32/float64 ndarray or a block-quantized weight (ops/quant/:
    a QuantizedMatrix multiplies and looks rows up as a float32 array does), else raise."""
    if isinstance(w, QuantizedMatrix):
        return w
    return check_float(name, w)


def check_same_dtype(**arrays: np.ndarray) -> None:
    """All float inputs of one op share a dtype: mixing would silently promote float32 to float64."""
    # note: a plain loop, no set or dict built: every op calls this, decoding ~10 times a layer
    first = None
    for arr in arrays.values():
        if arr is None:
            continue
        if first is None:
            first = arr.dtype
        elif arr.dtype != first:
            listing = ", ".join(f"{name}={a.dtype}" for name, a in arrays.items()
                                if a is not None)
            raise GlassformerError(f"expected inputs of one dtype, got {listing}")


def broadcasts_into(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of `shape` broadcasts to `target` without enlarging it: no more dims,
    each trailing dim equal to target's or 1. (np.broadcast_shapes answers more and costs ~5 us,
    a decoded token's whole budget for a small op.)

    >>> broadcasts_into((3, 1), (2, 3, 4)), broadcasts_into((2, 4), (3, 4))
    (True, False)
    """
    if len(shape) > len(target):
        return False
    for size, wanted in zip(reversed(shape), reversed(target)):
        if size != wanted and size != 1:
            return False
    return True


def _describe(dims: tuple[str, ...], sizes: dict[str, int]) -> str:
    """Render a legend shape, filling in sizes already known: ('B', 'C') -> '(B, C=768)'."""
    parts = []
    for letter in dims:
        if letter in sizes and letter != "...":
            parts.append(f"{letter}={sizes[letter]}")
        else:
            parts.append(letter)
    return "(" + ", ".join(parts) + ")"


def check_shape(name: str, x: np.ndarray, dims: tuple[str, ...],
                sizes: dict[str, int]) -> dict[str, int]:
    """Check `x.shape` against legend letters, binding unknown letters into `sizes`.

    `dims` may start with "..." for any number of leading dims (bound as a tuple under "...").
    Integers in `dims` are literal sizes. Returns `sizes` for chaining.
    """
    # note: letters are only ever added (setdefault), so the sizes bound before this array, which
    # a message shows, are the first `before` entries; no copy is made unless the check fails.
    # Kept lean (locals, no re-reads of x.ndim): every op calls it, ~25 times per decoded layer.
    shape = x.shape
    before = len(sizes)
    has_lead = len(dims) > 0 and dims[0] == "..."
    fixed = dims[1:] if has_lead else dims
    cut = len(shape) - len(fixed)                  # how many leading dims "..." covers
    if cut < 0 or (cut and not has_lead):
        raise ShapeError(f"expected {name} of shape {_describe(dims, sizes)}, "
                         f"got {tuple(shape)}")
    if has_lead:
        lead = shape[:cut]
        if sizes.setdefault("...", lead) != lead:
            raise ShapeError(
                f"expected {name} of shape {_describe(dims, sizes)} with leading dims "
                f"{sizes['...']}, got {tuple(shape)}")
    for letter, size in zip(fixed, shape[cut:]):
        if type(letter) is int:
            ok = size == letter
        else:
            ok = sizes.setdefault(letter, size) == size
        if not ok:
            known = dict(list(sizes.items())[:before])
            sizes.clear()
            sizes.update(known)  # leave `sizes` as it was when the check fails
            raise ShapeError(f"expected {name} of shape {_describe(dims, known)}, "
                             f"got {tuple(shape)}")
    return sizes
