"""One parameter's AdamW update as a numba loop: the twin of train/optim.py's adamw_update.

The twin makes 14 NumPy passes over the parameter (with one scratch array); this loop reads g,
p, m, v once and writes p, m, v once. It follows torch's operations one by one in the same
order, compiled without reassociation or fused multiply-adds (`exact`), so params and moments
equal the twin's bit for bit (tests/kernels/test_train_kernels.py).
"""
from __future__ import annotations

import numpy as np

from glassformer.kernels._numba_common import compiled_dtype, exact


@exact
def _adamw_flat(p, g, m, v, shrink, one_minus_beta1, beta2, one_minus_beta2,
                bias_correction2_sqrt, eps, minus_step_size):
    """train/optim.py's adamw_update on flat arrays, each element through the same float
    operations in the same order (shrink 1: no decay)."""
    for i in range(p.shape[0]):
        grad = g[i]
        param = p[i] * shrink
        moment = m[i] + (grad - m[i]) * one_minus_beta1
        second = v[i] * beta2 + grad * one_minus_beta2 * grad
        m[i] = moment
        v[i] = second
        denom = np.sqrt(second) / bias_correction2_sqrt + eps
        p[i] = param + moment / denom * minus_step_size


def adamw_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, *, shrink: float,
                 beta1: float, beta2: float, step_size: float, bias_correction2_sqrt: float,
                 eps: float) -> bool:
    """One parameter's AdamW update in place (train/optim.py's adamw_update, which says what
    each argument is). Returns False, touching nothing, when the arrays are not one float dtype,
    C-contiguous and of one shape: the caller then runs the twin."""
    if not (compiled_dtype(p, g, m, v) and p.shape == g.shape == m.shape == v.shape):
        return False
    kind = p.dtype.type
    _adamw_flat(p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1), kind(shrink),
                kind(1.0 - beta1), kind(beta2), kind(1.0 - beta2), kind(bias_correction2_sqrt),
                kind(eps), kind(-step_size))
    return True
