"""Optimisers over flat parameter dicts: AdamW, plain SGD and clipping by global gradient norm.

`params` and `grads` are flat dicts with the same dotted keys (`blocks.3.attn.wq`), float32 arrays.
The optimiser's memory is an explicit `AdamWState` that the caller passes in and receives back;
nothing is stored anywhere else.

AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"), written to match
`torch.optim.AdamW` (single-tensor CPU path) operation by operation, at step t = 1, 2, ...:

    p  <- p * (1 - lr * wd)                          decoupled decay, only for keys in `decay`
    m  <- m + (1 - beta1) * (g - m)                  torch's lerp_, = beta1 m + (1 - beta1) g
    v  <- v * beta2 + (1 - beta2) * g * g
    p  <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

Weight decay follows nanoGPT's rule: every matrix (ndim >= 2: projections, embeddings) decays;
biases and norm gains do not. `decay_keys(params)` computes that set.

note: for speed these functions update arrays IN PLACE: `adamw_step` writes into the arrays of
`params`, `state.m` and `state.v`; `sgd_step` into `params`; `clip_grad_norm` into `grads` (as
`torch.nn.utils.clip_grad_norm_` does). Each returns the dicts it updated, so the call reads as
`params, opt_state = adamw_step(params, grads, opt_state, ...)`. Copying 124M parameters every
step would cost more than the update itself. Hyperparameters are converted to Python floats, so a
float32 array stays float32 (NumPy 2 would otherwise promote against an np.float64 scalar).
"""
from __future__ import annotations

import math
from typing import Collection, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.kernels.choice import train_kernels

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_ divides by (total_norm + 1e-6)
ADAMW_EPS = 1e-8  # torch.optim.AdamW's default eps


class AdamWState(NamedTuple):
    """AdamW's memory: first and second moments per parameter key, and the steps taken so far."""
    m: dict[str, np.ndarray]   # running mean of gradients, same keys and shapes as params
    v: dict[str, np.ndarray]   # running mean of squared gradients
    t: int                     # number of adamw_step calls so far (bias correction uses t + 1)


def decay_keys(params: dict[str, np.ndarray]) -> frozenset[str]:
    """Keys that get weight decay: every parameter with ndim >= 2 (nanoGPT's rule)."""
    return frozenset(key for key, p in params.items() if p.ndim >= 2)


def adamw_init(params: dict[str, np.ndarray]) -> AdamWState:
    """Zero moments shaped like `params`, at step 0."""
    _check_params(params)
    m = {key: np.zeros_like(p) for key, p in params.items()}
    v = {key: np.zeros_like(p) for key, p in params.items()}
    return AdamWState(m=m, v=v, t=0)


def adamw_step(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: AdamWState,
               *, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = ADAMW_EPS,
               weight_decay: float = 0.01, decay: Collection[str] | None = None
               ) -> tuple[dict[str, np.ndarray], AdamWState]:
    """One AdamW update of every parameter, in place; returns (params, state with t + 1).

    `decay` names the keys that get weight decay; None means `decay_keys(params)` (ndim >= 2).
    The arrays of `params`, `state.m` and `state.v` are overwritten; `grads` is only read.
    """
    lr, beta1, beta2 = float(lr), float(beta1), float(beta2)
    eps, weight_decay = float(eps), float(weight_decay)
    _check_hyper(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
    _check_grads(params, grads)
    _check_same_keys("state.m", state.m, params)
    _check_same_keys("state.v", state.v, params)
    decay_set = decay_keys(params) if decay is None else frozenset(decay)
    unknown = sorted(decay_set - params.keys())
    if unknown:
        raise GlassformerError(f"decay names keys that are not parameters: {unknown[:5]}")
    step = state.t + 1
    # The bias corrections and step size are Python floats, computed as torch computes them.
    step_size = lr / (1.0 - beta1 ** step)
    bias_correction2_sqrt = math.sqrt(1.0 - beta2 ** step)
    shrink = 1.0 - lr * weight_decay
    compiled = train_kernels()        # None: the NumPy path (GLASSFORMER_KERNELS=numpy)
    for key, p in params.items():
        hyper = dict(shrink=shrink if weight_decay != 0.0 and key in decay_set else 1.0,
                     beta1=beta1, beta2=beta2, step_size=step_size,
                     bias_correction2_sqrt=bias_correction2_sqrt, eps=eps)
        g, m, v = grads[key], state.m[key], state.v[key]
        if compiled is None or not compiled.adamw_update(p, g, m, v, **hyper):
            adamw_update(p, g, m, v, **hyper)
    return params, AdamWState(m=state.m, v=state.v, t=step)


def adamw_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, *, shrink: float,
                 beta1: float, beta2: float, step_size: float, bias_correction2_sqrt: float,
                 eps: float) -> bool:
    """One parameter's AdamW update in place, the operations of the module docstring in torch's
    order: p <- p * shrink (1 - lr wd, or 1: no decay), then the moments, then the step
    (step_size = lr / (1 - beta1^t), bias_correction2_sqrt = sqrt(1 - beta2^t)). The reference
    twin of kernels/train_numba.py's adamw_update, which gives the same bits in one pass;
    here 14 passes over the parameter with one scratch array. Returns True (done)."""
    work = np.empty_like(p)  # one scratch array, reused for every temporary
    if shrink != 1.0:
        np.multiply(p, shrink, out=p)                       # decoupled decay, before the update
    np.subtract(g, m, out=work)
    work *= 1.0 - beta1
    m += work                                               # m <- lerp(m, g, 1 - beta1)
    v *= beta2
    np.multiply(g, 1.0 - beta2, out=work)
    work *= g
    v += work                                               # v <- beta2 v + (1 - beta2) g^2
    np.sqrt(v, out=work)
    work /= bias_correction2_sqrt
    work += eps                                             # denom = sqrt(v_hat) + eps
    np.divide(m, work, out=work)
    work *= -step_size
    p += work
    return True


def sgd_step(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], *, lr: float
             ) -> dict[str, np.ndarray]:
    """Plain gradient descent, p <- p - lr * g, in place; returns `params`."""
    lr = float(lr)
    if not lr >= 0.0:
        raise GlassformerError(f"expected lr >= 0, got {lr}")
    _check_grads(params, grads)
    for key, p in params.items():
        work = np.multiply(grads[key], -lr)
        p += work
    return params


def clip_grad_norm(grads: dict[str, np.ndarray], max_norm: float
                   ) -> tuple[dict[str, np.ndarray], float]:
    """Scale all grads by min(1, max_norm / (norm + 1e-6)), in place; returns (grads, norm).

    The norm is the global L2 norm over every gradient, as if they were one long vector (the norm
    before clipping, as torch.nn.utils.clip_grad_norm_ returns it). A NaN or inf norm is returned
    unchanged and the grads are then scaled by NaN or 0, as in torch; the caller decides to stop.
    """
    max_norm = float(max_norm)
    if not max_norm > 0.0:
        raise GlassformerError(f"expected max_norm > 0, got {max_norm}")
    total_norm = global_norm(squared_norms(grads).values())
    return scale_grads(grads, clip_coefficient(total_norm, max_norm)), total_norm


def squared_norms(grads: dict[str, np.ndarray]) -> dict[str, float]:
    """||g||^2 of each gradient (a BLAS dot, returned as a Python float), in the order of grads."""
    return {key: float(np.dot(g.reshape(-1), g.reshape(-1))) for key, g in grads.items()}


def global_norm(squares) -> float:
    """sqrt of the per-gradient squared norms added up in double, in the order given."""
    total = 0.0
    for square in squares:
        total += square
    return math.sqrt(total)


def clip_coefficient(total_norm: float, max_norm: float) -> float:
    """max_norm / (norm + 1e-6): the factor clipping scales every gradient by when it is < 1."""
    return float(max_norm) / (total_norm + CLIP_EPS)


def scale_grads(grads: dict[str, np.ndarray], coef: float) -> dict[str, np.ndarray]:
    """g *= coef for every gradient, in place, unless coef >= 1 (then nothing: clipping is off).

    note: torch multiplies by the clamped coefficient even when it is 1; x * 1.0 == x, so skip.
    A NaN coef (from a NaN norm) does scale, so the NaN shows in the update, as in torch.
    """
    coef = float(coef)
    if not coef >= 1.0:
        for g in grads.values():
            g *= coef
    return grads


def _check_params(params: dict[str, np.ndarray]) -> None:
    """Every parameter is a float32 or float64 ndarray."""
    for key, p in params.items():
        if not isinstance(p, np.ndarray) or p.dtype not in (np.float32, np.float64):
            got = p.dtype if isinstance(p, np.ndarray) else type(p).__name__
            raise GlassformerError(f"expected parameter {key!r} to be float32 or float64, got {got}")


def _check_same_keys(name: str, arrays: dict[str, np.ndarray],
                     params: dict[str, np.ndarray]) -> None:
    """`arrays` has exactly the keys of `params`, each with the parameter's shape and dtype."""
    if arrays.keys() != params.keys():
        missing = sorted(params.keys() - arrays.keys())
        extra = sorted(arrays.keys() - params.keys())
        raise GlassformerError(
            f"{name} and params have different keys: missing {missing[:5]}, extra {extra[:5]}")
    for key, p in params.items():
        a = arrays[key]
        if a.shape != p.shape or a.dtype != p.dtype:
            raise GlassformerError(
                f"expected {name}[{key!r}] of shape {p.shape} and dtype {p.dtype}, "
                f"got {a.shape} {a.dtype}")


def _check_grads(params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
    """Params are float arrays and grads match them key for key, in shape and dtype."""
    _check_params(params)
    _check_same_keys("grads", grads, params)


def _check_hyper(*, lr: float, beta1: float, beta2: float, eps: float,
                 weight_decay: float) -> None:
    """Hyperparameters in the ranges torch.optim.AdamW accepts (NaN fails every check)."""
    if not lr >= 0.0:
        raise GlassformerError(f"expected lr >= 0, got {lr}")
    if not 0.0 <= beta1 < 1.0 or not 0.0 <= beta2 < 1.0:
        raise GlassformerError(f"expected betas in [0, 1), got beta1={beta1}, beta2={beta2}")
    if not eps >= 0.0:
        raise GlassformerError(f"expected eps >= 0, got {eps}")
    if not weight_decay >= 0.0:
        raise GlassformerError(f"expected weight_decay >= 0, got {weight_decay}")
