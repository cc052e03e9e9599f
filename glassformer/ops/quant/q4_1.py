"""Q4_1: GGUF's 4-bit block format with a minimum, 32 weights in 20 bytes (5 bits a weight).

One block (llama.cpp's `block_q4_1`; SmolLM2's shipped file stores its projections so):

    bytes 0-1    d        float16 scale (the step between codes)
    bytes 2-3    m        float16 minimum (the block's smallest weight)
    bytes 4-19   qs[16]   two 4-bit codes a byte: weight j low nibble, weight j + 16 high

    w_i = d * q_i + m                 q_i in 0..15: 16 levels from m up to m + 15 d

Quantize (llama.cpp's `quantize_row_q4_1_ref`, copied by `gguf.quants`): m = min x,
d = (max x - min x) / 15, q_i = trunc((x_i - m) / d + 0.5) clipped to 0..15.

`dequantize` (n, 20) uint8 -> (n, 32) float32 and `quantize` back, many blocks at once.
"""
from __future__ import annotations

import numpy as np

from glassformer.ops.quant.q4_0 import nibbles, pack_nibbles

BLOCK = 32        # weights a block
BYTES = 20        # bytes a block: 2 (d) + 2 (m) + 16 (qs)
HALVES = (0, 2)    # byte offsets of the float16 fields (scales, minimums)


def dequantize(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """blocks (n, 20) uint8 -> weights (n, 32) float32 (into `out` when given); equal to
    gguf.quants.dequantize bit for bit: (d * q) rounded, then + m rounded, never fused.

    >>> dequantize(quantize(np.arange(32, dtype=np.float32)[None]))[0, :3].tolist()
    [0.0, 0.0, 2.06640625]
    """
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)          # (n, 1)
    m = blocks[:, 2:4].view(np.float16).astype(np.float32)          # (n, 1)
    out = np.multiply(d, nibbles(blocks[:, 4:]), out=out, dtype=np.float32)   # (n, 32)
    return np.add(out, m, out=out)


def quantize(x: np.ndarray) -> np.ndarray:
    """weights (n, 32) float32 -> blocks (n, 20) uint8, as llama.cpp and gguf quantize them."""
    x = np.asarray(x, np.float32)
    high = x.max(axis=1, keepdims=True)                             # (n, 1)
    low = x.min(axis=1, keepdims=True)                              # (n, 1)
    d = (high - low) / np.float32(15)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    codes = np.trunc((x - low) * inv + np.float32(0.5)).astype(np.uint8).clip(0, 15)
    return np.concatenate([d.astype(np.float16).view(np.uint8),
                           low.astype(np.float16).view(np.uint8), pack_nibbles(codes)], axis=1)
