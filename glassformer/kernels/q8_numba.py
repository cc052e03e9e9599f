"""llama.cpp's 8-bit activation products as numba loops: int8 x int8 -> int32 sums a block.

    activation_product(x, kind, blocks, cols)    y = x @ W^T, x rounded to 8-bit blocks first

the compiled twin of ops/quant/activations_q8.py (the NumPy reference: read its docstring for the
formats and the order of the sums), with the same arguments and the same bits:

- `quantize_q8` rounds each block of 32 values of x to int8 codes, its float16 scale d and
  (Q8_1) s = float16(d * sum(q)), as `quantize_activations`; float16 rounding is done by hand
  (`_to_half`: numba has no float16), equal to NumPy's astype(float16) for every float32; it also
  keeps each block's code sum (Q4_0's and Q5_0's centre: sum (q - 8) x = sum q x - 8 sum x);
- the product reads W four rows at a time, as stored (no unpacked copy): for each row of x and
  each block, the four rows' integer dot products are one SIMD expression each (int8_dots.py:
  int8 codes against Q8_0's int8, Q4_x's nibbles or Q5_0's five-bit codes, summed in int32;
  vpdpbusd on a VNNI CPU), the x block loaded once for the four; then (dx * dw) * sum is added
  to a float32 total, block after block (dw read by int8_dots.half_at: one float16 conversion
  where the CPU has it, not quant_numba's 256 KiB table, which W's stream evicts from L1/L2);
  Q4_1 adds sx * mw apart, then the two. While it reads a group, it asks for the next group's
  cache lines (int8_dots.prefetch, with the first row of x): a decode step's W streams from
  memory, and the hardware prefetcher alone left the q8 products 1.1x slower than the float32
  ones there, 0.5x with it (docs/performance.md, this kernel's section). With two or more rows
  of x (serve's batched decode, a prefill) the rows go two at a time (`_four_pairs`): W's block
  is read and unpacked once for the pair, 1.3x faster at 8 rows than a row at a time, the same
  bits (each output's sums in the same order).

The integer sums are exact in any order; the scale products and the sum over blocks run without
fastmath (a fused multiply-add or a reordered sum would round otherwise than the NumPy twin, and
the parity test asks for equal bits). Threads: with numba's thread count above one (kernels/
choice.py sets it to BLAS's count), the groups of four rows are split over the threads (`prange`,
as quant_numba.py's `*_threads`) for a W of at least MIN_THREADED_ROWS rows.
Q8_K (for Q4_K weights) stays on the NumPy reference: SmolLM2's rows (576) are not a multiple of
its 256, so no shipped SmolLM2 file uses it.

Imported only through kernels/choice.py (`q8_kernels`), which sets numba's cache folder first.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from glassformer.kernels.int8_dots import dot_fives, dot_int8, dot_nibbles, half_at, prefetch
from glassformer.kernels.quant_numba import HALF_VALUES, MIN_THREADED_ROWS

jit = numba.njit(cache=True, nogil=True, error_model="numpy")
pjit = numba.njit(cache=True, nogil=True, error_model="numpy", parallel=True)
KINDS = ("q8_0", "q4_0", "q5_0", "q4_1")
BYTES = {"q8_0": 34, "q4_0": 18, "q5_0": 22, "q4_1": 20}
CODE = {"q8_0": 0, "q4_0": 1, "q5_0": 2, "q4_1": 3}


@jit
def _to_half(v):
    """float32 v rounded to the nearest float16 (half to even), as float32: exact powers of two
    scale the rounding step, so np.rint does it (subnormal float16 step 2^-24; inf past 65504)."""
    a = abs(v)
    if a == 0.0 or not math.isfinite(v):
        return v
    _, e = math.frexp(a)                                   # a = f * 2^e, 0.5 <= f < 1
    step = math.ldexp(1.0, max(e - 11, -24))               # float16 keeps 11 significant bits
    r = np.float32(np.rint(np.float64(v) / step) * step)   # exact: step is a power of two
    return np.float32(np.inf) * np.sign(v) if abs(r) > 65504.0 else r


@jit
def quantize_q8(x, with_sums, codes, d, s, sums):
    """x (N, C) float32 -> codes (N, C) int8, d (N, C/32), s (N, C/32) (Q8_1's d * sum(q) when
    with_sums, else left as given), sums (N, C/32) int32 (each block's sum of codes):
    activations_q8.quantize_activations's twin."""
    for i in range(x.shape[0]):
        for b in range(x.shape[1] // 32):
            top = np.float32(0.0)
            for j in range(32):
                top = max(top, abs(x[i, b * 32 + j]))
            inv = np.float32(0.0) if top == 0 else np.float32(127.0) / top
            total = 0
            for j in range(32):
                q = np.int8(np.rint(x[i, b * 32 + j] * inv))
                codes[i, b * 32 + j] = q
                total += np.int32(q)
            sums[i, b] = total
            scale = top / np.float32(127.0)
            if with_sums:
                s[i, b] = _to_half(np.float32(scale * np.float32(total)))
            d[i, b] = _to_half(scale)


@jit
def dot(kind, xi, o, w, at, centre_sum):
    """sum_j qx_j qw_j over block b of row w (at = b * block bytes, o = b * 32): the integer
    activations_q8.block_sum takes, W's codes q - 8 (Q4_0), q - 16 (Q5_0), nibbles (Q4_1)."""
    if kind == 0:
        return dot_int8(xi, o, w, at + 2)
    if kind == 1:
        return dot_nibbles(xi, o, w, at + 2) - 8 * centre_sum
    if kind == 2:
        return dot_fives(xi, o, w, at + 2) - 16 * centre_sum
    return dot_nibbles(xi, o, w, at + 4)


@jit
def _four(kind, size, codes, d, s, sums, blocks, halves, y, r):
    """y[:, r..r+3] (the last row repeated past W's end: a tail group writes it twice, alike)."""
    last = blocks.shape[0] - 1
    r0, r1, r2, r3 = r, min(r + 1, last), min(r + 2, last), min(r + 3, last)
    w0, w1, w2, w3 = blocks[r0], blocks[r1], blocks[r2], blocks[r3]
    ahead = blocks[min(r + 4, last)]                       # the next group's first row
    span = 4 * blocks.shape[1]                             # ... and the next 4 rows' bytes
    for i in range(codes.shape[0]):
        xi = codes[i]
        t0 = t1 = t2 = t3 = np.float32(0.0)                  # the scale terms
        m0 = m1 = m2 = m3 = np.float32(0.0)                  # Q4_1's minimum terms
        for b in range(d.shape[1]):
            at, o, dx, centre = b * size, b * 32, d[i, b], sums[i, b]
            if i == 0 and r + 4 <= last:                     # every line of 4 blocks
                for k in range(0, 4 * size, 64):
                    prefetch(ahead, min(4 * at + k, span - 1))
            t0 += (dx * half_at(w0, at, halves)) * np.float32(dot(kind, xi, o, w0, at, centre))
            t1 += (dx * half_at(w1, at, halves)) * np.float32(dot(kind, xi, o, w1, at, centre))
            t2 += (dx * half_at(w2, at, halves)) * np.float32(dot(kind, xi, o, w2, at, centre))
            t3 += (dx * half_at(w3, at, halves)) * np.float32(dot(kind, xi, o, w3, at, centre))
            if kind == 3:
                sx = s[i, b]
                m0 += sx * half_at(w0, at + 2, halves)
                m1 += sx * half_at(w1, at + 2, halves)
                m2 += sx * half_at(w2, at + 2, halves)
                m3 += sx * half_at(w3, at + 2, halves)
        if kind == 3:
            t0, t1, t2, t3 = t0 + m0, t1 + m1, t2 + m2, t3 + m3
        y[i, r0], y[i, r1], y[i, r2], y[i, r3] = t0, t1, t2, t3


@jit
def _four_pairs(kind, size, codes, d, s, sums, blocks, halves, y, r):
    """_four for two rows of x at a time (N >= 2: serve's batched decode, a prefill): each of
    W's block codes and scales is read once for the pair (LLVM shares the loads and the nibble
    unpacking of the two `dot`s), each output's float sums in _four's order, so the same bits.
    An odd last row is paired with itself (written twice, alike)."""
    last, n = blocks.shape[0] - 1, codes.shape[0]
    r0, r1, r2, r3 = r, min(r + 1, last), min(r + 2, last), min(r + 3, last)
    w0, w1, w2, w3 = blocks[r0], blocks[r1], blocks[r2], blocks[r3]
    ahead = blocks[min(r + 4, last)]                       # the next group's first row
    span = 4 * blocks.shape[1]                             # ... and the next 4 rows' bytes
    if r + 4 <= last:               # the next group's lines, all asked for here: a prefetch
        for k in range(0, span, 64):    # inside the block loop (as _four) cost 15% at 8 rows
            prefetch(ahead, k)
    for i in range(0, n, 2):
        j = min(i + 1, n - 1)
        xa, xb = codes[i], codes[j]
        a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)     # the scale terms
        p0 = p1 = p2 = p3 = q0 = q1 = q2 = q3 = np.float32(0.0)     # Q4_1's minimum terms
        for b in range(d.shape[1]):
            at, o, da, db, ca, cb = b * size, b * 32, d[i, b], d[j, b], sums[i, b], sums[j, b]
            h0, h1 = half_at(w0, at, halves), half_at(w1, at, halves)
            h2, h3 = half_at(w2, at, halves), half_at(w3, at, halves)
            a0 += (da * h0) * np.float32(dot(kind, xa, o, w0, at, ca))
            b0 += (db * h0) * np.float32(dot(kind, xb, o, w0, at, cb))
            a1 += (da * h1) * np.float32(dot(kind, xa, o, w1, at, ca))
            b1 += (db * h1) * np.float32(dot(kind, xb, o, w1, at, cb))
            a2 += (da * h2) * np.float32(dot(kind, xa, o, w2, at, ca))
            b2 += (db * h2) * np.float32(dot(kind, xb, o, w2, at, cb))
            a3 += (da * h3) * np.float32(dot(kind, xa, o, w3, at, ca))
            b3 += (db * h3) * np.float32(dot(kind, xb, o, w3, at, cb))
            if kind == 3:
                sa, sb = s[i, b], s[j, b]
                m0, m1 = half_at(w0, at + 2, halves), half_at(w1, at + 2, halves)
                m2, m3 = half_at(w2, at + 2, halves), half_at(w3, at + 2, halves)
                p0, p1, p2, p3 = p0 + sa * m0, p1 + sa * m1, p2 + sa * m2, p3 + sa * m3
                q0, q1, q2, q3 = q0 + sb * m0, q1 + sb * m1, q2 + sb * m2, q3 + sb * m3
        if kind == 3:
            a0, a1, a2, a3 = a0 + p0, a1 + p1, a2 + p2, a3 + p3
            b0, b1, b2, b3 = b0 + q0, b1 + q1, b2 + q2, b3 + q3
        y[i, r0], y[i, r1], y[i, r2], y[i, r3] = a0, a1, a2, a3
        y[j, r0], y[j, r1], y[j, r2], y[j, r3] = b0, b1, b2, b3


@jit
def _groups(kind, size, codes, d, s, sums, blocks, halves, y):
    """Every group of four rows of W: one row of x by _four, more by _four_pairs."""
    for g in range((blocks.shape[0] + 3) // 4):
        if codes.shape[0] == 1:
            _four(kind, size, codes, d, s, sums, blocks, halves, y, 4 * g)
        else:
            _four_pairs(kind, size, codes, d, s, sums, blocks, halves, y, 4 * g)


@pjit
def _groups_threads(kind, size, codes, d, s, sums, blocks, halves, y):
    for g in numba.prange((blocks.shape[0] + 3) // 4):
        if codes.shape[0] == 1:
            _four(kind, size, codes, d, s, sums, blocks, halves, y, 4 * g)
        else:
            _four_pairs(kind, size, codes, d, s, sums, blocks, halves, y, 4 * g)


@jit
def q8_product(x, kind, size, blocks, halves, threads):
    """y (N, R) = x (N, C) float32 @ W^T, W's rows (R, row bytes) of format `kind` (CODE):
    x quantized once, then activations_q8.q8_product's sums in the same order."""
    n, nb = x.shape[0], x.shape[1] // 32
    codes = np.empty((n, x.shape[1]), np.int8)
    d = np.empty((n, nb), np.float32)
    s = np.zeros((n, nb), np.float32)
    sums = np.empty((n, nb), np.int32)
    quantize_q8(x, kind == 3, codes, d, s, sums)
    y = np.empty((n, blocks.shape[0]), np.float32)
    if threads:
        _groups_threads(kind, size, codes, d, s, sums, blocks, halves, y)
    else:
        _groups(kind, size, codes, d, s, sums, blocks, halves, y)
    return y


def activation_product(x: np.ndarray, kind: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """activations_q8.activation_product's twin for Q8_0, Q4_0, Q5_0 and Q4_1 weights:
    x (N, C) float32 -> y (N, R) float32, equal bit for bit."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    threads = blocks.shape[0] >= MIN_THREADED_ROWS and numba.get_num_threads() > 1
    return q8_product(x, CODE[kind], BYTES[kind], np.ascontiguousarray(blocks), HALF_VALUES,
                      threads)
