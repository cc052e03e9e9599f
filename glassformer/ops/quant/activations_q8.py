"""8-bit activations, as llama.cpp's CPU backend multiplies a quantized weight (NumPy reference).

llama.cpp never widens a quantized weight: before `y = x @ W^T` it rounds the activation row x to
8-bit blocks of its own (ggml's `vec_dot_type` of W's format), then takes integer dot products
block by block and applies the two blocks' scales once per block:

    W's format           x becomes   one block of x                          per block of 32 (256)
    q8_0, q4_0, q5_0     Q8_0        32 int8 q, float16 d                   (dw * dx) * sum(qw qx)
    q4_1                 Q8_1        32 int8 q, float16 d, float16 s = d sum(q)
                                                               (dw * dx) * sum(qw qx) + mw * sx
    q4_k                 Q8_K        256 int8 q, float32 d      (dx dw) sum_j sc_j sum(qw qx)_j
                                                                - (dx dmin) sum_j m_j sum(qx)_j

Activation blocks (`quantize_activations`, ggml-cpu's x86 quantize_row_q8_0 / q8_1 with AVX;
quantize_row_q8_K_ref for Q8_K):

    Q8_0, Q8_1   a = max |x|, d = a / 127 (float32; stored float16), q = round(x * (127 / a)),
                 rounded half to even (the SIMD round); Q8_1's s = float16(d * sum(q)), d float32
    Q8_K         m = the x of largest |x|, signed; q = min(127, round(x * (-127 / m))),
                 half to even; d = 1 / (-127 / m) kept float32

Why it matters: the rounding of x is up to half a step of a / 127 a weight, so llama.cpp's logits
differ from the float32 product of the same blocks (ops/quant/product.py, glassformer's default
and its reference). `activation_product` computes llama.cpp's numbers, to compare with it and to
run as it does (`--activation-quant q8`).

Exactness: a block's integer sum sum(qw qx) is at most 32 * 127 * 127 < 2^24, so a float32
matmul of the codes gives it exactly (whatever BLAS's order); only the per-block scale products
and the sum over blocks round, in a fixed order (`q8_product`): blocks in turn, float32, the
scale terms apart from the minimum terms, then the two added. kernels/quant_numba.py's
`q8_product` adds in the same order, so the two agree bit for bit. llama.cpp itself adds the
blocks in 8 SIMD lanes with fused multiply-adds: the same numbers to within float32 rounding.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops.quant.q4_0 import nibbles
from glassformer.ops.quant.q4_k import codes_of, scales_and_mins

KINDS = ("q8_0", "q4_0", "q5_0", "q4_1", "q4_k")
BLOCK_OF = {"q8_0": 32, "q4_0": 32, "q5_0": 32, "q4_1": 32, "q4_k": 256}
SLAB_VALUES = 1 << 21     # weight codes widened at once: 8 MiB of float32 integers


class Q8Rows(NamedTuple):
    """Activation rows x (N, C) as 8-bit blocks of `block` values (32, or 256 for Q8_K)."""
    codes: np.ndarray     # (N, C) int8
    d: np.ndarray         # (N, C / block) float32: the scale (float16-rounded for Q8_0/Q8_1)
    s: np.ndarray         # (N, C / block) float32: Q8_1's d * sum(q) float16-rounded; Q8_K:
    #                       (N, C / 32) the sum of each 32 codes (int, as float32); else zeros


def activation_type(kind: str) -> str:
    """The 8-bit block type llama.cpp rounds x to for a weight of format `kind`."""
    return {"q4_1": "q8_1", "q4_k": "q8_k"}.get(kind, "q8_0")


def quantize_activations(x: np.ndarray, kind: str) -> Q8Rows:
    """x (N, C) float32 -> its 8-bit blocks for a product with a `kind` weight (table above)."""
    x = np.asarray(x, np.float32)
    n, cols = x.shape
    if activation_type(kind) == "q8_k":
        return _quantize_q8_k(x)
    blocks = x.reshape(n, cols // 32, 32)                              # (N, nb, 32)
    top = np.abs(blocks).max(axis=2)                                   # (N, nb)
    d = top / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(top == 0, np.float32(0), np.float32(127) / top)
    codes = np.rint(blocks * inv[:, :, None]).astype(np.int8)          # half to even
    s = np.zeros_like(d)
    if activation_type(kind) == "q8_1":
        sums = codes.sum(axis=2, dtype=np.int32).astype(np.float32)      # exact: |sum| <= 4064
        s = (d * sums).astype(np.float16).astype(np.float32)           # float32 product, rounded
    d = d.astype(np.float16).astype(np.float32)
    return Q8Rows(codes.reshape(n, cols), d, s)


def _quantize_q8_k(x: np.ndarray) -> Q8Rows:
    """Q8_K: blocks of 256 scaled by their signed largest value, d kept in float32."""
    n, cols = x.shape
    blocks = x.reshape(n, cols // 256, 256)                            # (N, nb, 256)
    at = np.abs(blocks).argmax(axis=2)[:, :, None]
    peak = np.take_along_axis(blocks, at, axis=2)[:, :, 0]             # (N, nb), signed
    with np.errstate(divide="ignore"):
        inv = np.where(peak == 0, np.float32(0), np.float32(-127) / peak)
    codes = np.minimum(np.rint(blocks * inv[:, :, None]), 127).astype(np.int8)
    with np.errstate(divide="ignore"):
        d = np.where(inv == 0, np.float32(0), np.float32(1) / inv)
    sums = codes.reshape(n, -1, 32).sum(axis=2, dtype=np.int32).astype(np.float32)  # (N, C/32)
    return Q8Rows(codes.reshape(n, cols), d.astype(np.float32), sums)


def weight_blocks(kind: str, blocks: np.ndarray, cols: int):
    """W's rows (r, row bytes) -> (codes (r, C) float32 integers, d (r, C/32 or C/256), extra):
    the integers a block multiplies (q - 8 for Q4_0, q - 16 for Q5_0), its float16 scale, and
    Q4_1's minimum m (r, C/32) or Q4_K's (sc, m, dmin): what the integer product needs."""
    r = blocks.shape[0]
    if kind == "q4_k":
        sb = blocks.reshape(-1, 144)
        d = sb[:, 0:2].view(np.float16).astype(np.float32).reshape(r, -1)
        dmin = sb[:, 2:4].view(np.float16).astype(np.float32).reshape(r, -1)
        sc, m = scales_and_mins(sb[:, 4:16])                          # (r * nb, 8) each
        codes = codes_of(sb[:, 16:]).astype(np.float32).reshape(r, cols)
        return codes, d, (sc.reshape(r, -1).astype(np.float64), m.reshape(r, -1).astype(np.float64),
                          dmin)
    size = {"q8_0": 34, "q4_0": 18, "q5_0": 22, "q4_1": 20}[kind]
    b = blocks.reshape(-1, size)
    d = b[:, 0:2].view(np.float16).astype(np.float32).reshape(r, -1)  # (r, nb)
    if kind == "q8_0":
        codes = b[:, 2:].view(np.int8)
    elif kind == "q4_0":
        codes = nibbles(b[:, 2:]).view(np.int8) - np.int8(8)
    elif kind == "q5_0":
        top = np.unpackbits(b[:, 2:6], axis=1, bitorder="little")
        codes = (nibbles(b[:, 6:]) | (top << np.uint8(4))).view(np.int8) - np.int8(16)
    else:                                                              # q4_1
        codes = nibbles(b[:, 4:])
    extra = b[:, 2:4].view(np.float16).astype(np.float32).reshape(r, -1) if kind == "q4_1" \
        else None
    return codes.astype(np.float32).reshape(r, cols), d, extra


def block_sum(qx: np.ndarray, qw: np.ndarray, b: int, size: int) -> np.ndarray:
    """Block b's integer dot products: qx (N, C), qw (r, C) integers as float32 -> (N, r)
    float32, exact (each at most 32 * 127 * 127 < 2^24, so BLAS's order cannot round it)."""
    cut = slice(b * size, (b + 1) * size)
    return qx[:, cut] @ qw[:, cut].T                                   # (N, 32) @ (32, r)


def q8_product(q: Q8Rows, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """y (N, R) = x @ W^T from x's 8-bit blocks `q` and W's blocks (R, row bytes), as llama.cpp.
    The blocks' terms are added in turn in float32: scale terms, then (Q4_1) the minimum terms
    apart, the two added last; Q4_K's super-block terms likewise."""
    rows, n = blocks.shape[0], q.codes.shape[0]
    y = np.empty((n, rows), np.float32)
    qx = q.codes.astype(np.float32)                                    # (N, C)
    step = max(1, SLAB_VALUES // cols)                                 # rows of W widened at once
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        qw, dw, extra = weight_blocks(kind, blocks[start:stop], cols)
        if kind == "q4_k":
            y[:, start:stop] = _q4_k_slab(q, qx, qw, dw, extra)
            continue
        total = np.zeros((n, stop - start), np.float32)                # (N, r)
        lows = np.zeros((n, stop - start), np.float32)
        for b in range(cols // 32):
            total += (q.d[:, b, None] * dw[None, :, b]) * block_sum(qx, qw, b, 32)
            if kind == "q4_1":
                lows += q.s[:, b, None] * extra[None, :, b]               # sx * mw
        y[:, start:stop] = total + lows if kind == "q4_1" else total
    return y


def _q4_k_slab(q: Q8Rows, qx, qw, dw, extra) -> np.ndarray:
    """Q4_K rows times Q8_K x: per super-block (dx dw) sumi - (dx dmin) summ (module table)."""
    sc, m, dmin = extra                                    # (r, nb*8), (r, nb*8), (r, nb)
    n, r = qx.shape[0], qw.shape[0]
    total = np.zeros((n, r), np.float32)
    for b in range(dw.shape[1]):
        sumi = np.zeros((n, r), np.float64)                            # integers, exact
        summ = np.zeros((n, r), np.float64)
        for j in range(8):
            at = b * 8 + j
            sumi += sc[None, :, at] * block_sum(qx, qw, at, 32).astype(np.float64)
            summ += q.s[:, at, None].astype(np.float64) * m[None, :, at]
        dx = q.d[:, b, None]                                           # (N, 1)
        total += (dx * dw[None, :, b]) * sumi.astype(np.float32) \
            - (dx * dmin[None, :, b]) * summ.astype(np.float32)
    return total


def activation_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """product.rows_t_product's signature, llama.cpp's arithmetic: x (N, C) rounded to 8-bit
    blocks, then the integer block products. -> y (N, R) float32."""
    return q8_product(quantize_activations(x, kind), kind, blocks, cols)
