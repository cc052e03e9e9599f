"""Softmax over the last axis with a boolean mask, forward and backward, as numba loops: the
twins of ops/softmax.py (same names, arguments and ctx), for attention's (..., T, S) weights.

The twin makes ~6 NumPy passes over the scores (the mask as a -inf bias, exp, the row sums as a
product, the checks, the scaling), each with its own temporary; here one row of S scores stays
in L1: exp(x) (exp_numba.py's expf, which vectorizes) times the
mask, the sum, the scaling; shifted by the row max only when the sum says it must be, as the
twin does. The two agree to float32 rounding. A row with no allowed key gives zeros, as the twin's. Float32 only, and a mask
of shape (T, S) shared by every leading index (a causal or window rule) or none: anything else
goes to the twin.
"""
from __future__ import annotations

import numpy as np

from glassformer.kernels._numba_common import compiled_dtype, jit, rows_of
from glassformer.kernels.exp_numba import expf
from glassformer.ops import softmax
from glassformer.ops.softmax import SoftmaxCtx


@jit
def _masked_exps(x, shift, allowed, probs):
    """probs = exp(x - shift) * allowed for one row; returns their sum."""
    total = np.float32(0.0)
    for j in range(x.shape[0]):
        weight = expf(x[j] - shift) * allowed[j]
        probs[j] = weight
        total += weight
    return total


@jit
def _softmax_rows(x, mask, probs):
    """probs[r] = softmax(x[r]) over the keys mask[r % T] allows (mask (T, S) float32, 1 for
    allowed, 0 for masked: a product, which vectorizes where a branch would not). As the twin:
    no shift first, the row max only for a row whose sum leaves [2^-64, 2^64] (the exp clamps
    at 88, so an overflow shows as a sum of at least 1.6e38). Every row in one loop, and the
    rare rows to redo in a second: called row by row, or branching in the row loop, the short
    rows cost more in control than in arithmetic."""
    rows, width = x.shape
    period = mask.shape[0]
    zero = np.float32(0.0)
    totals = np.empty(rows, np.float32)
    for r in range(rows):
        totals[r] = _masked_exps(x[r], zero, mask[r % period], probs[r])
    for r in range(rows):
        if not (totals[r] >= np.float32(2.0 ** -64) and totals[r] <= np.float32(2.0 ** 64)):
            allowed = mask[r % period]
            best = np.float32(-np.inf)
            for j in range(width):
                if allowed[j] != zero:
                    best = max(best, x[r, j])
            if best == -np.inf:                   # nothing allowed: zeros, as the twin gives
                totals[r] = np.float32(1.0)
                for j in range(width):
                    probs[r, j] = zero
            else:
                totals[r] = _masked_exps(x[r], best, allowed, probs[r])
    for r in range(rows):
        scale = np.float32(1.0) / totals[r]
        for j in range(width):
            probs[r, j] *= scale


@jit
def _softmax_back_rows(dprobs, probs, dx):
    """dx[r] = p (dp - <dp, p>), one row at a time."""
    for r in range(dprobs.shape[0]):
        dot = dprobs[r, 0] - dprobs[r, 0]
        for j in range(dprobs.shape[1]):
            dot += dprobs[r, j] * probs[r, j]
        for j in range(dprobs.shape[1]):
            dx[r, j] = (dprobs[r, j] - dot) * probs[r, j]


def _takes(x: np.ndarray, mask: np.ndarray | None) -> bool:
    """Whether the kernel takes x (float32, C-contiguous, at least (T, S)) and its mask."""
    if not (isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim >= 2
            and x.flags.c_contiguous and x.shape[-1] > 0):
        return False
    return mask is None or (isinstance(mask, np.ndarray) and mask.dtype == np.bool_
                            and mask.shape == x.shape[-2:])


def softmax_forward(x: np.ndarray, *, mask: np.ndarray | None = None
                    ) -> tuple[np.ndarray, SoftmaxCtx]:
    """ops/softmax.py's softmax_forward, (..., T, S) -> (..., T, S), one compiled pass per row."""
    if not _takes(x, mask):
        return softmax.softmax_forward(x, mask=mask)
    rows = rows_of(x)                                        # (N, S), N = (...) x T
    probs = np.empty_like(rows)
    allowed = (np.ones((1, x.shape[-1]), np.float32) if mask is None
               else mask.astype(np.float32))              # (T, S) or (1, S): 1 kept, 0 masked
    _softmax_rows(rows, allowed, probs)
    probs = probs.reshape(x.shape)
    return probs, SoftmaxCtx(probs=probs)


def softmax_backward(dprobs: np.ndarray, ctx: SoftmaxCtx) -> np.ndarray:
    """ops/softmax.py's softmax_backward: p (dp - <dp, p>), (..., S) -> (..., S)."""
    if not (compiled_dtype(dprobs, ctx.probs) and dprobs.dtype == np.float32
            and dprobs.shape == ctx.probs.shape and dprobs.ndim >= 1):
        return softmax.softmax_backward(dprobs, ctx)
    rows = rows_of(dprobs)                                   # (N, S)
    dx = np.empty_like(rows)
    _softmax_back_rows(rows, rows_of(ctx.probs), dx)
    return dx.reshape(dprobs.shape)
