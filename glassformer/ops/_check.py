"""Input checks shared by every op: dtype and shape, with errors in legend letters.

An op calls these at its entry point so that a wrong input fails with a message such as
``expected x of shape (B, T, C=768), got (4, 256, 512)`` instead of a NumPy broadcasting
traceback three calls deeper. `sizes` is a plain dict the caller owns: the first array binds each
letter to a size and later arrays must agree with it.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError, ShapeError

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


def check_same_dtype(**arrays: np.ndarray) -> None:
    """All float inputs of one op share a dtype: mixing would silently promote float32 to float64."""
    dtypes = {name: arr.dtype for name, arr in arrays.items() if arr is not None}
    if len(set(dtypes.values())) > 1:
        listing = ", ".join(f"{name}={dt}" for name, dt in dtypes.items())
        raise GlassformerError(f"expected inputs of one dtype, got {listing}")


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
    # a message shows, are the first `before` entries; no copy is made unless the check fails
    before = len(sizes)
    fixed = dims[1:] if dims and dims[0] == "..." else dims
    has_lead = len(fixed) != len(dims)
    if x.ndim < len(fixed) or (not has_lead and x.ndim != len(fixed)):
        raise ShapeError(f"expected {name} of shape {_describe(dims, sizes)}, "
                         f"got {tuple(x.shape)}")
    tail = x.shape[x.ndim - len(fixed):]
    if has_lead:
        lead = tuple(x.shape[:x.ndim - len(fixed)])
        if "..." in sizes and sizes["..."] != lead:
            raise ShapeError(
                f"expected {name} of shape {_describe(dims, sizes)} with leading dims "
                f"{sizes['...']}, got {tuple(x.shape)}")
        sizes.setdefault("...", lead)
    for letter, size in zip(fixed, tail):
        if isinstance(letter, int):
            ok = size == letter
        else:
            ok = sizes.setdefault(letter, size) == size
        if not ok:
            known = dict(list(sizes.items())[:before])
            sizes.clear()
            sizes.update(known)  # leave `sizes` as it was when the check fails
            raise ShapeError(f"expected {name} of shape {_describe(dims, known)}, "
                             f"got {tuple(x.shape)}")
    return sizes
