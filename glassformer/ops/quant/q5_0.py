"""Q5_0: GGUF's symmetric 5-bit block format, 32 weights in 22 bytes (5.5 bits a weight).

Here as llama.cpp's fallback for Q4_K: a row whose length is not a multiple of Q4_K's 256 (every
SmolLM2 matrix 576 wide) is written Q5_0 by `llama-quantize`, and so by `glassformer quantize`.
One block (llama.cpp's `block_q5_0`):

    bytes 0-1    d        float16 scale
    bytes 2-5    qh       32 bits, little-endian: bit j is the fifth (top) bit of weight j's code
    bytes 6-21   qs[16]   the low 4 bits: weight j in byte j's low nibble, j + 16 in its high one

    w_j = d * (q_j - 16)              q_j = low nibble | qh bit j << 4, in 0..31

Quantize (llama.cpp's `quantize_row_q5_0_ref`, copied by `gguf.quants`): d = (the weight of
largest magnitude, signed) / -16, q_j = trunc(w_j / d + 16.5) clipped to 0..31.
"""
from __future__ import annotations

import numpy as np

from glassformer.ops.quant.q4_0 import nibbles, pack_nibbles

BLOCK = 32        # weights a block
BYTES = 22        # bytes a block: 2 (d) + 4 (qh) + 16 (qs)
HALVES = (0,)     # byte offsets of the float16 fields (scales, minimums)


def dequantize(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """blocks (n, 22) uint8 -> weights (n, 32) float32 (into `out` when given); equal to
    gguf.quants.dequantize bit for bit (q - 16 exact, then one rounding: d times it)."""
    d = blocks[:, :2].view(np.float16).astype(np.float32)                    # (n, 1)
    top = np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little")           # (n, 32) 0/1
    codes = nibbles(blocks[:, 6:]) | (top << np.uint8(4))                    # (n, 32) 0..31
    centred = codes.view(np.int8) - np.int8(16)                              # -16..15
    return np.multiply(d, centred, out=out, dtype=np.float32)


def quantize(x: np.ndarray) -> np.ndarray:
    """weights (n, 32) float32 -> blocks (n, 22) uint8, as llama.cpp and gguf quantize them."""
    x = np.asarray(x, np.float32)
    at = np.abs(x).argmax(axis=1)[:, None]
    d = np.take_along_axis(x, at, axis=1) / np.float32(-16)                  # (n, 1)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    codes = np.trunc(x * inv + np.float32(16.5)).astype(np.uint8).clip(0, 31)   # (n, 32)
    top = np.packbits(codes >> np.uint8(4), axis=1, bitorder="little")      # (n, 4)
    return np.concatenate([d.astype(np.float16).view(np.uint8), top,
                           pack_nibbles(codes & np.uint8(0x0F))], axis=1)
