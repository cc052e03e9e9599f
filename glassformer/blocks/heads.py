"""Heads: a projection's output (B, T, n*D) seen as n heads of width D, and back.

Attention (blocks/attention.py, blocks/qkv.py) and latent attention (blocks/mla.py) split their
projections into heads and merge the heads' outputs before the output projection:

    (B, T, n*D)  --split_heads-->  (B, n, T, D)  --merge_heads-->  (B, T, n*D)

split_heads returns a view; merge_heads copies (the transposed heads are not contiguous).
"""
from __future__ import annotations

import numpy as np


def split_heads(x: np.ndarray, n: int) -> np.ndarray:
    """(B, T, n*D) -> (B, n, T, D)."""
    b, t, c = x.shape
    return x.reshape(b, t, n, c // n).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, n, T, D) -> (B, T, n*D)."""
    b, n, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, n * d)
