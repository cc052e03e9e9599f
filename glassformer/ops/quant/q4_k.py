"""Q4_K: GGUF's 4-bit "k-quant", 256 weights in 144 bytes (4.5 bits a weight).

A super-block of 256 weights is 8 sub-blocks of 32. Each sub-block has its own 6-bit scale and
6-bit minimum; those 16 small integers are themselves scaled by two float16 numbers shared by the
super-block. One super-block (llama.cpp's `block_q4_K`):

    bytes 0-1      d          float16: the scale of the sub-block scales
    bytes 2-3      dmin       float16: the scale of the sub-block minimums
    bytes 4-15     scales[12] eight 6-bit scales sc_j and eight 6-bit minimums m_j, packed:
                              bytes 0-3   sc_0..3 in the low 6 bits (high 2 bits: sc_4..7's top)
                              bytes 4-7   m_0..3 in the low 6 bits  (high 2 bits: m_4..7's top)
                              bytes 8-11  sc_4..7 low 4 bits | m_4..7 low 4 bits << 4
    bytes 16-143   qs[128]    4-bit codes; 32 bytes for each pair of sub-blocks: sub-block 2c in
                              the low nibbles, sub-block 2c + 1 in the high nibbles

    w = (d * sc_j) * q - (dmin * m_j)      for weight q (0..15) of sub-block j

Quantize: `gguf` does not implement Q4_K's quantization, so this matches llama.cpp's reference
`quantize_row_q4_K_ref` (ggml-quants.c, no importance matrix: what `llama-quantize` does without
one). Per sub-block `make_qkx2_quants` searches 21 candidate scales (iscale = (14 + 0.1 s) /
(max - min), s = 0..20) for the (scale, min) that minimise the weighted squared error, weights
sqrt(mean x^2) + |x_i|, each candidate's scale and min solved by least squares; then the 8 scales
and mins are quantized to 6 bits against the largest of each, and the codes recomputed from those.
Rounding is llama.cpp's nearest_int (half to even, as np.rint). Sums run in NumPy's float32
order, and a C build may fuse a*b + c into one rounding (GCC's default contraction), so the search
can land one step apart: against llama-cpp-python 0.3.36's `llama_model_quantize` (pure Q4_K) on
a tiny random LLaMA, 2.2% of the codes and some 6-bit scales differ by a step, with the same RMS
error (1.2415e-3 here, 1.2418e-3 llama.cpp's): `python bench/q4k_llamacpp.py`.

`dequantize` (n, 144) uint8 -> (n, 256) float32 (equal to gguf's bit for bit); `quantize` back.
"""
from __future__ import annotations

import numpy as np

BLOCK = 256       # weights a super-block
BYTES = 144       # 2 (d) + 2 (dmin) + 12 (scales) + 128 (qs)
HALVES = (0, 2)    # byte offsets of the float16 fields (scales, minimums)
SUB = 32          # weights a sub-block
STEPS = 20        # make_qkx2_quants' nstep: candidates s = 0..20


def scales_and_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """packed (n, 12) uint8 -> (sc (n, 8), m (n, 8)) uint8 in 0..63 (layout: module docstring)."""
    low, mid, top = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]       # (n, 4) each
    sc = np.concatenate([low & 0x3F, (top & 0x0F) | ((low >> 2) & 0x30)], axis=1)
    m = np.concatenate([mid & 0x3F, (top >> 4) | ((mid >> 2) & 0x30)], axis=1)
    return sc, m


def pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """sc, m (n, 8) uint8 in 0..63 -> packed (n, 12) uint8, the inverse of scales_and_mins."""
    low = (sc[:, :4] & 0x3F) | ((sc[:, 4:] >> 4) << 6)
    mid = (m[:, :4] & 0x3F) | ((m[:, 4:] >> 4) << 6)
    top = (sc[:, 4:] & 0x0F) | ((m[:, 4:] & 0x0F) << 4)
    return np.concatenate([low, mid, top], axis=1).astype(np.uint8)


def codes_of(qs: np.ndarray) -> np.ndarray:
    """qs (n, 128) uint8 -> codes (n, 8, 32) uint8, sub-block by sub-block."""
    pairs = qs.reshape(-1, 4, 1, SUB)                                    # (n, 4, 1, 32)
    both = np.concatenate([pairs & np.uint8(0x0F), pairs >> np.uint8(4)], axis=2)   # (n,4,2,32)
    return both.reshape(-1, 8, SUB)


def dequantize(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """blocks (n, 144) uint8 -> weights (n, 256) float32 (into `out` when given); equal to
    gguf.quants.dequantize bit for bit: (d * sc) and (dmin * m) rounded first, as gguf does."""
    n = blocks.shape[0]
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)             # (n, 1)
    dmin = blocks[:, 2:4].view(np.float16).astype(np.float32)          # (n, 1)
    sc, m = scales_and_mins(blocks[:, 4:16])                            # (n, 8) each
    step = (d * sc.astype(np.float32))[:, :, None]                      # (n, 8, 1)
    floor = (dmin * m.astype(np.float32))[:, :, None]                   # (n, 8, 1)
    shaped = None if out is None else out.reshape(n, 8, SUB)
    shaped = np.multiply(step, codes_of(blocks[:, 16:]), out=shaped, dtype=np.float32)
    np.subtract(shaped, floor, out=shaped)                              # (n, 8, 32)
    return shaped.reshape(n, BLOCK) if out is None else out


def quantize(x: np.ndarray) -> np.ndarray:
    """weights (n, 256) float32 -> blocks (n, 144) uint8, as llama.cpp's quantize_row_q4_K_ref."""
    x = np.asarray(x, np.float32).reshape(-1, 8, SUB)                  # (n, 8, 32)
    rms = np.sqrt((x * x).sum(axis=2, keepdims=True) / np.float32(SUB))
    scale, low, codes = best_scale_and_min(x, rms + np.abs(x))         # (n, 8), (n, 8), codes
    zero = np.float32(0)
    top_scale = np.maximum(scale.max(axis=1, keepdims=True), zero)     # (n, 1)
    top_min = np.maximum(low.max(axis=1, keepdims=True), zero)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_scale = np.where(top_scale > 0, np.float32(63) / top_scale, zero)
        inv_min = np.where(top_min > 0, np.float32(63) / top_min, zero)
    sc = np.minimum(np.rint(inv_scale * scale), 63).astype(np.uint8)   # (n, 8)
    m = np.minimum(np.rint(inv_min * low), 63).astype(np.uint8)
    d = (top_scale / np.float32(63)).astype(np.float16)                # (n, 1)
    dmin = (top_min / np.float32(63)).astype(np.float16)
    step = (d.astype(np.float32) * sc)[:, :, None]                     # (n, 8, 1)
    floor = (dmin.astype(np.float32) * m)[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        again = np.clip(np.rint((x + floor) / step), 0, 15)
    codes = np.where(step != 0, again, codes).astype(np.uint8)          # llama.cpp skips d == 0
    pairs = codes.reshape(-1, 4, 2, SUB)
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << np.uint8(4))).reshape(-1, 128)
    return np.concatenate([d.view(np.uint8), dmin.view(np.uint8), pack_scales(sc, m), qs],
                          axis=1)


def best_scale_and_min(x: np.ndarray, w: np.ndarray):
    """llama.cpp's make_qkx2_quants(32, 15, x, w, rmin=-1, rdelta=0.1, nstep=20, use_mad=false)
    on every sub-block at once. x, w (..., 32) -> (scale (...), -min (...), codes (..., 32)):
    x ~ scale * code + min, min <= 0 (llama.cpp returns the minimum negated)."""
    f32 = np.float32
    low = np.minimum(x.min(axis=-1), f32(0))                           # (...)
    high = x.max(axis=-1)
    span = high - low
    flat = span == 0
    span = np.where(flat, f32(1), span)                                # no division by zero
    sum_w = w.sum(axis=-1)
    sum_x = (w * x).sum(axis=-1)
    iscale = f32(15) / span
    codes = np.clip(np.rint(iscale[..., None] * (x - low[..., None])), 0, 15)
    scale = f32(1) / iscale
    best = (w * np.square(scale[..., None] * codes + low[..., None] - x)).sum(axis=-1)
    for s in range(STEPS + 1):
        iscale = (f32(-1) + f32(0.1) * f32(s) + f32(15)) / span
        trial = np.clip(np.rint(iscale[..., None] * (x - low[..., None])), 0, 15)
        sum_l = (w * trial).sum(axis=-1)
        sum_l2 = (w * trial * trial).sum(axis=-1)
        sum_xl = (w * trial * x).sum(axis=-1)
        det = sum_w * sum_l2 - sum_l * sum_l
        with np.errstate(divide="ignore", invalid="ignore"):
            t_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            t_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = t_min > 0                                        # min clamped to 0
            t_scale = np.where(positive, sum_xl / sum_l2, t_scale)
        t_min = np.where(positive, f32(0), t_min)
        error = (w * np.square(t_scale[..., None] * trial + t_min[..., None] - x)).sum(axis=-1)
        better = (det > 0) & (error < best) & ~flat
        codes = np.where(better[..., None], trial, codes)
        best = np.where(better, error, best)
        scale = np.where(better, t_scale, scale)
        low = np.where(better, t_min, low)
    scale = np.where(flat, f32(0), scale)
    codes = np.where(flat[..., None], f32(0), codes)
    return scale.astype(f32), (-low).astype(f32), codes
