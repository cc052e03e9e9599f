"""Q4_0: GGUF's symmetric 4-bit block format, 32 weights in 18 bytes (4.5 bits a weight).

One block (llama.cpp's `block_q4_0`):

    bytes 0-1    d        float16 scale
    bytes 2-17   qs[16]   two 4-bit codes a byte: byte j holds weight j in its low nibble and
                          weight j + 16 in its high nibble

    w_i = d * (q_i - 8)               q_i in 0..15, so w in d * [-8, 7]; no separate minimum

Quantize (llama.cpp's `quantize_row_q4_0_ref`, copied by `gguf.quants`): the weight of largest
magnitude, signed, is `max`; d = max / -8 (so that weight lands on code 0, the one extra
negative step), q_i = trunc(x_i / d + 8.5) clipped to 0..15.

`dequantize` (n, 18) uint8 -> (n, 32) float32 and `quantize` back, many blocks at once.
"""
from __future__ import annotations

import numpy as np

BLOCK = 32        # weights a block
BYTES = 18        # bytes a block: 2 (d) + 16 (qs)
HALVES = (0,)      # byte offsets of the float16 fields (scales, minimums)


def nibbles(packed: np.ndarray) -> np.ndarray:
    """packed (n, 16) uint8 -> codes (n, 32) uint8: the 16 low nibbles, then the 16 high ones."""
    return np.concatenate([packed & np.uint8(0x0F), packed >> np.uint8(4)], axis=1)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """codes (n, 32) uint8 in 0..15 -> (n, 16) uint8: code j low, code j + 16 high."""
    return codes[:, :16] | (codes[:, 16:] << np.uint8(4))


def dequantize(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """blocks (n, 18) uint8 -> weights (n, 32) float32 (into `out` when given); equal to
    gguf.quants.dequantize bit for bit (q - 8 is exact, then one rounding: d times it).

    >>> dequantize(quantize(np.arange(-16, 16, dtype=np.float32)[None]))[0, :3].tolist()
    [-16.0, -14.0, -14.0]
    """
    d = blocks[:, :2].view(np.float16).astype(np.float32)           # (n, 1)
    centred = nibbles(blocks[:, 2:]).view(np.int8) - np.int8(8)      # (n, 32) in -8..7
    return np.multiply(d, centred, out=out, dtype=np.float32)       # (n, 32)


def quantize(x: np.ndarray) -> np.ndarray:
    """weights (n, 32) float32 -> blocks (n, 18) uint8, as llama.cpp and gguf quantize them."""
    x = np.asarray(x, np.float32)
    at = np.abs(x).argmax(axis=1)[:, None]                          # (n, 1)
    signed_max = np.take_along_axis(x, at, axis=1)                  # (n, 1)
    d = signed_max / np.float32(-8)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    codes = np.trunc(x * inv + np.float32(8.5)).astype(np.uint8).clip(0, 15)   # (n, 32)
    return np.concatenate([d.astype(np.float16).view(np.uint8), pack_nibbles(codes)], axis=1)
