"""Q8_0: GGUF's 8-bit block format, 32 weights in 34 bytes (8.5 bits a weight).

One block, as llama.cpp's `block_q8_0` lays it out:

    bytes 0-1    d       float16 scale
    bytes 2-33   qs[32]  int8 codes, one a weight, in order

    w_i = d * qs_i                        (no minimum: the codes are symmetric around 0)

Quantize (llama.cpp's `quantize_row_q8_0_ref`, which `gguf.quants` copies bit for bit):
d = max|x| / 127, qs_i = round(x_i / d) rounded half away from zero; d is then stored as float16,
so the codes were chosen with the float32 d and dequantize with the float16 one (llama.cpp's own
order, matched here).

`dequantize` and `quantize` work on many blocks at once: (n, 34) uint8 <-> (n, 32) float32.
They are the reference for a compiled twin (the same arguments, the same bits).
"""
from __future__ import annotations

import numpy as np

BLOCK = 32        # weights a block
BYTES = 34        # bytes a block: 2 (d) + 32 (qs)
HALVES = (0,)      # byte offsets of the float16 fields (scales, minimums)


def dequantize(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """blocks (n, 34) uint8 -> weights (n, 32) float32, written into `out` when given.

    Equal to gguf.quants.dequantize bit for bit: the int8 code times the float16 scale widened to
    float32, one rounding.

    >>> dequantize(quantize(np.arange(32, dtype=np.float32)[None]))[0, :4].tolist()
    [0.0, 0.9765625, 1.953125, 2.9296875]
    """
    d = blocks[:, :2].view(np.float16).astype(np.float32)        # (n, 2) u8 -> (n, 1) f32
    codes = blocks[:, 2:].view(np.int8)                          # (n, 32) int8
    return np.multiply(codes, d, out=out, dtype=np.float32)      # (n, 32)


def quantize(x: np.ndarray) -> np.ndarray:
    """weights (n, 32) float32 -> blocks (n, 34) uint8, as llama.cpp and gguf quantize them."""
    x = np.asarray(x, np.float32)
    d = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)   # (n, 1)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    codes = round_half_away(x * inv).astype(np.int8)             # (n, 32)
    return np.concatenate([d.astype(np.float16).view(np.uint8), codes.view(np.uint8)], axis=1)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf: to the nearest integer, halves away from zero (np.rint would go to even)."""
    magnitude = np.abs(v)
    floored = np.floor(magnitude)
    return np.sign(v) * (floored + np.floor(2 * (magnitude - floored)))
