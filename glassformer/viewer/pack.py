"""Attention weights stored compactly for the page: uint8 per row, lower triangle, base64.

Each row of weights (one query's distribution over keys) is divided by its own maximum and
rounded to 256 levels:

    q[t, s] = round(255 * w[t, s] / max_s w[t, s])        w ~= q * max / 255

so an entry is off by at most max / 510 <= 0.002, and the largest weight of every row is exact to
float32. A causal model's row t has t + 1 keys (the rest are exactly 0), so only the lower
triangle is kept, row after row:

    T = 3     row 0: q00            stored: q00 q10 q11 q20 q21 q22
              row 1: q10 q11
              row 2: q20 q21 q22

One layer is one base64 string (its heads one after the other) and one string of float32 row
maxima (H * T of them); the page decodes a layer only when a view first asks for it.
"""
from __future__ import annotations

import base64

import numpy as np

LEVELS = 255.0  # uint8's largest value


def quantize_rows(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """weights (H, T, S) -> (uint8 (H, T, S), float32 row maxima (H, T))."""
    row_max = weights.max(axis=-1)                                   # (H, T)
    safe = np.where(row_max > 0.0, row_max, 1.0)  # a padding row of zeros stays zeros
    levels = np.rint(weights / safe[..., None] * LEVELS)             # (H, T, S), 0..255
    return levels.astype(np.uint8), row_max.astype(np.float32)


def pack_layer(weights: np.ndarray, causal: bool) -> dict:
    """One layer's weights (H, T, S) as {"q": base64 uint8, "max": base64 float32 (H, T)}."""
    levels, row_max = quantize_rows(weights)
    t, s = weights.shape[1:]
    if causal and t == s:
        rows, cols = np.tril_indices(t)                              # row by row, 0..t each
        levels = levels[:, rows, cols]                               # (H, T (T + 1) / 2)
    return {"q": _b64(np.ascontiguousarray(levels).tobytes()),
            "max": _b64(row_max.astype("<f4").tobytes())}


def unpack_layer(packed: dict, heads: int, t: int, s: int, causal: bool) -> np.ndarray:
    """The inverse of pack_layer, up to the rounding: (H, T, S) float32 (what the page draws)."""
    levels = np.frombuffer(base64.b64decode(packed["q"]), np.uint8)
    row_max = np.frombuffer(base64.b64decode(packed["max"]), "<f4").reshape(heads, t)
    full = np.zeros((heads, t, s), np.float32)
    if causal and t == s:
        rows, cols = np.tril_indices(t)
        full[:, rows, cols] = levels.reshape(heads, -1)
    else:
        full[...] = levels.reshape(heads, t, s)
    return full * (row_max[..., None] / LEVELS)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
