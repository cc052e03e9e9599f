"""LayerNorm and RMSNorm, forward and backward, as numba loops: the twins of ops/layer_norm.py
and ops/rms_norm.py (same names, arguments, checks and ctx).

One row of x stays in L1 across three short loops (the mean, the centred squares, the scaling),
where the twin makes 5-7 NumPy passes over the whole (N, C) array with their temporaries; the
backward's row sums and its dw, db column sums share one loop. RMSNorm is the same loops without
the mean (`centre` False). Float32 and float64 alike (the gradient checks run them in float64);
sums reassociated, so the results equal the twins' to rounding (tests/kernels/). The rows run on
one thread: split over numba's threads (prange) beside OpenBLAS's spinning ones, a prefill's
norms took 4x as long on a quiet 2-core machine (docs/performance.md, issue 44's quiet reruns).
"""
from __future__ import annotations

import numpy as np

from glassformer.kernels._numba_common import compiled_dtype, jit, rows_of
from glassformer.ops import layer_norm, rms_norm
from glassformer.ops._scalars import check_eps
from glassformer.ops.layer_norm import LayerNormCtx
from glassformer.ops.rms_norm import RMSNormCtx


@jit
def _norm_row(x, w, b, eps, inv_width, one, centre, y, xhat):
    """One row x (C,): mean (0 unless centre: RMSNorm), variance, xhat = (x - mean) rstd,
    y = xhat w (+ b); returns rstd. eps, inv_width and one are scalars of x's dtype, so float32
    stays float32."""
    width = x.shape[0]
    total = eps - eps
    if centre:
        for c in range(width):
            total += x[c]
    mean = total * inv_width
    square = eps - eps
    for c in range(width):
        centered = x[c] - mean
        xhat[c] = centered
        square += centered * centered
    scale = one / np.sqrt(square * inv_width + eps)
    for c in range(width):
        normalized = xhat[c] * scale
        xhat[c] = normalized
        y[c] = normalized * w[c]
        if b is not None:
            y[c] += b[c]
    return scale


@jit
def _norm_rows(x, w, b, eps, inv_width, one, centre, y, xhat, rstd):
    """_norm_row for every row of x (N, C); rstd (N, 1)."""
    for r in range(x.shape[0]):
        rstd[r, 0] = _norm_row(x[r], w, b, eps, inv_width, one, centre, y[r], xhat[r])


@jit
def _norm_back_rows(dy, xhat, rstd, w, inv_width, centre, dx, dw, db):
    """Per row: g = dy w, dx = rstd (g - mean(g) - xhat mean(g xhat)), without the mean(g) term
    unless centre (RMSNorm); dw, db summed over rows (db None: no bias)."""
    width = dy.shape[1]
    for c in range(width):
        dw[c] = 0.0
        if db is not None:
            db[c] = 0.0
    for r in range(dy.shape[0]):
        g_total = inv_width - inv_width
        gx_total = inv_width - inv_width
        for c in range(width):
            grad = dy[r, c] * w[c]
            g_total += grad
            gx_total += grad * xhat[r, c]
            dw[c] += dy[r, c] * xhat[r, c]
            if db is not None:
                db[c] += dy[r, c]
        g_mean = g_total * inv_width if centre else inv_width - inv_width
        gx_mean = gx_total * inv_width
        scale = rstd[r, 0]
        for c in range(width):
            dx[r, c] = (dy[r, c] * w[c] - g_mean - xhat[r, c] * gx_mean) * scale


def layer_norm_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                       eps: float = 1e-5) -> tuple[np.ndarray, LayerNormCtx]:
    """ops/layer_norm.py's layer_norm_forward in one compiled pass per row (its checks, its
    ctx). Arrays the kernel does not take (mixed dtypes, non-contiguous) go to the twin."""
    layer_norm.check_layer_norm_inputs(x, w, b)
    if not compiled_dtype(*(a for a in (x, w, b) if a is not None)):
        return layer_norm.layer_norm_forward(x, w, b, eps=eps)
    kind = x.dtype.type
    eps = kind(check_eps("eps", eps))
    rows = rows_of(x)  # (N, C)
    y, xhat = np.empty_like(rows), np.empty_like(rows)                # (N, C)
    rstd = np.empty((rows.shape[0], 1), x.dtype)                      # (N, 1)
    _norm_rows(rows, w, b, eps, kind(1.0 / x.shape[-1]), kind(1.0), True, y, xhat, rstd)
    lead = x.shape[:-1]
    return y.reshape(x.shape), LayerNormCtx(xhat=xhat.reshape(x.shape),
                                            rstd=rstd.reshape(lead + (1,)), w=w,
                                            has_bias=b is not None)


def layer_norm_backward(dy: np.ndarray, ctx: LayerNormCtx
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """ops/layer_norm.py's layer_norm_backward: (dx, dw, db), one compiled pass per row."""
    if not compiled_dtype(dy, ctx.xhat, ctx.rstd, ctx.w) or dy.shape != ctx.xhat.shape:
        return layer_norm.layer_norm_backward(dy, ctx)
    width = ctx.w.shape[0]
    dy_rows = rows_of(dy)  # (N, C)
    dx = np.empty_like(dy_rows)                                       # (N, C)
    dw = np.empty_like(ctx.w)                                         # (C,)
    db = np.empty_like(ctx.w) if ctx.has_bias else None               # (C,)
    _norm_back_rows(dy_rows, rows_of(ctx.xhat), ctx.rstd.reshape(-1, 1), ctx.w,
                    dy.dtype.type(1.0 / width), True, dx, dw, db)
    return dx.reshape(dy.shape), dw, db


def rms_norm_forward(x: np.ndarray, w: np.ndarray, *, eps: float = 1e-6
                     ) -> tuple[np.ndarray, RMSNormCtx]:
    """ops/rms_norm.py's rms_norm_forward: LayerNorm's loops without the mean."""
    rms_norm.check_rms_norm_inputs(x, w)
    if not compiled_dtype(x, w):
        return rms_norm.rms_norm_forward(x, w, eps=eps)
    kind = x.dtype.type
    eps = kind(check_eps("eps", eps))
    rows = rows_of(x)  # (N, C)
    y, xhat = np.empty_like(rows), np.empty_like(rows)                # (N, C)
    rstd = np.empty((rows.shape[0], 1), x.dtype)                      # (N, 1)
    _norm_rows(rows, w, None, eps, kind(1.0 / x.shape[-1]), kind(1.0), False, y, xhat, rstd)
    return y.reshape(x.shape), RMSNormCtx(xhat=xhat.reshape(x.shape),
                                          rstd=rstd.reshape(x.shape[:-1] + (1,)), w=w)


def rms_norm_backward(dy: np.ndarray, ctx: RMSNormCtx) -> tuple[np.ndarray, np.ndarray]:
    """ops/rms_norm.py's rms_norm_backward: (dx, dw)."""
    if not compiled_dtype(dy, ctx.xhat, ctx.rstd, ctx.w) or dy.shape != ctx.xhat.shape:
        return rms_norm.rms_norm_backward(dy, ctx)
    dy_rows = rows_of(dy)  # (N, C)
    dx, dw = np.empty_like(dy_rows), np.empty_like(ctx.w)             # (N, C), (C,)
    _norm_back_rows(dy_rows, rows_of(ctx.xhat), ctx.rstd.reshape(-1, 1), ctx.w,
                    dy.dtype.type(1.0 / ctx.w.shape[0]), False, dx, dw, None)
    return dx.reshape(dy.shape), dw
