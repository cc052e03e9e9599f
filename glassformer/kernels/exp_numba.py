"""The one exponential of the compiled kernels: Cephes' float32 expf as plain arithmetic that
the compiler vectorizes (numba's own exp is one libm call per number, and in a loop it
dominates; numba has no vector exp without Intel's SVML).

    expf(x)    e^x:  k = round(x / ln 2), r = x - k ln 2 (ln 2 in two parts, so r is exact)
    exp2f(x)   2^x:  k = round(x),        r = (x - k) ln 2

and then both e^x = 2^k e^r, e^r = 1 + r + r^2 P(r) (degree 5, |r| <= ln 2 / 2, within 1-2
ulp), 2^k written straight into a float's exponent bits (`_float_from_bits`, a bit cast the
compiler keeps inside a vectorized loop). The GELU, SiLU/SwiGLU and softmax loops call expf
(activation_numba.py, softmax_numba.py); the prefill's attention calls exp2f on scores already
multiplied by log2(e) (prefill_numba.py).

Ranges: expf clamps x to [-87, 88] (e^-87 = 1.6e-38, the smallest normal floats; e^88 =
1.65e38, below the largest), so it never overflows and a caller spots a huge row by its sum;
exp2f clamps x to [-127, 127], and 2^-127 and below give 0. A NaN is not carried through the
clamp: a caller that must keep NaNs adds x - x (prefill_numba.exp_rows does).

note: numba caches each compiled function by its own file's timestamp: after editing this file,
clear numba's cache (kernels/choice.py's cache_dir) so the loops that inline these recompile.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from glassformer.kernels._numba_common import jit

LN2_HI, LN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)   # ln 2 = HI + LO
LN2, LOG2E = np.float32(0.6931471805599453), np.float32(1.4426950408889634)
# Cephes expf: e^r = 1 + r + r^2 (((((Q0 r + Q1) r + Q2) r + Q3) r + Q4) r + Q5)
Q0, Q1, Q2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), \
    np.float32(8.3334519073e-3)
Q3, Q4, Q5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), \
    np.float32(5.0000001201e-1)
ONE, ROUND, BIAS = np.float32(1.0), np.float32(128.5), np.int32(128)


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float32 whose 32 bits are the int32 `bits` (a bit cast, no conversion)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@jit
def _power_times_exp(k, r):
    """2^k e^r for an int32 k in [-127, 127] (2^-127: 0) and |r| <= ln 2 / 2."""
    p = ((((Q0 * r + Q1) * r + Q2) * r + Q3) * r + Q4) * r + Q5
    return (p * r * r + r + ONE) * _float_from_bits((k + np.int32(127)) << np.int32(23))


@jit
def expf(x):
    """e^x, float32, x clamped to [-87, 88]."""
    z = min(max(x, np.float32(-87.0)), np.float32(88.0))
    # note: k by truncation of a positive number (z / ln 2 + 128.5 > 0), not np.floor
    k = np.int32(z * LOG2E + ROUND) - BIAS
    return _power_times_exp(k, z - np.float32(k) * LN2_HI - np.float32(k) * LN2_LO)


@jit
def exp2f(x):
    """2^x, float32, x clamped to [-127, 127] (0 at -127 and below, and for -inf)."""
    z = min(max(x, np.float32(-127.0)), np.float32(127.0))
    k = np.int32(z + ROUND) - BIAS
    return _power_times_exp(k, (z - np.float32(k)) * LN2)
