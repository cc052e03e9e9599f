"""Shared by the op tests: an optional torch import and a comparison relative to the array's max."""
from __future__ import annotations

import numpy as np
import pytest

try:
    import torch
except ImportError:  # the non-torch tests still run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def assert_close(ours, ref, rtol):
    """Relative to the array's largest entry: near-zero entries carry no relative precision."""
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * float(np.abs(ref).max()))
