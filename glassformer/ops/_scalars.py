"""Checks for scalar settings of an op (eps, dropout p, label smoothing), with clear errors.

Each returns the value as a Python float: NumPy 2 lets an np.float64 scalar promote a float32
array to float64, and a Python float does not, so settings enter the math as Python floats.
"""
from __future__ import annotations

import math
import numbers

from glassformer.errors import GlassformerError


def _as_real(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise GlassformerError(f"expected {name} to be a number, got {type(value).__name__}")
    return float(value)


def check_eps(name: str, value) -> float:
    """A finite value >= 0 (a norm's eps), as a Python float.

    >>> check_eps("eps", 1e-5)
    1e-05
    """
    eps = _as_real(name, value)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise GlassformerError(f"expected {name} to be finite and >= 0, got {value!r}")
    return eps


def check_fraction(name: str, value, *, allow_one: bool) -> float:
    """A value in [0, 1) (or [0, 1] with allow_one), as a Python float.

    >>> check_fraction("p", 0.1, allow_one=False)
    0.1
    """
    frac = _as_real(name, value)
    upper_ok = frac <= 1.0 if allow_one else frac < 1.0
    if not (frac >= 0.0 and upper_ok):  # note: also rejects NaN, for which every comparison fails
        interval = "[0, 1]" if allow_one else "[0, 1)"
        raise GlassformerError(f"expected {name} in {interval}, got {value!r}")
    return frac
