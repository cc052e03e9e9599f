"""Log-softmax, and cross-entropy fused with it: the loss of a language model.

log_softmax over the last axis, with log-sum-exp so that exp() never overflows:

    m        = max_v x_v
    logp_v   = (x_v - m) - log sum_u exp(x_u - m)
    dx_v     = dlogp_v - p_v * sum_u dlogp_u              p = softmax(x) = exp(logp)

Cross-entropy with label smoothing eps, for logits (..., V) and integer targets (...):

    nll      = -logp[target]                              per position
    smooth   = -(1/V) sum_v logp_v                        per position (cross-entropy with uniform)
    loss     = mean over non-ignored positions of (1 - eps) * nll + eps * smooth

This is exactly `torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),
ignore_index=..., label_smoothing=eps)` with reduction="mean": the target distribution is
q = (1 - eps) * onehot(target) + eps / V, and positions whose target equals `ignore_index`
(-100, torch's default) count neither in the sum nor in the count n_valid.

Backward is fused: the softmax Jacobian and the log collapse into "probabilities minus target".

    dlogits  = (p - q) * dloss / n_valid                  zero rows where the target is ignored

Deviation from torch: if every target is ignored, torch returns NaN (0 / 0); we return a loss of
exactly 0 with a zero gradient, so a batch of pure padding cannot poison a training run.
Derivation: docs/derivations/cross_entropy.md.
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float, check_shape
from glassformer.ops._ids import check_ids
from glassformer.ops._scalars import check_fraction
from glassformer.ops.softmax import row_max

IGNORE_INDEX = -100  # targets equal to this count for nothing (torch's default ignore_index)


class LogSoftmaxCtx(NamedTuple):
    """Saved for backward: the probabilities p = exp(logp) (..., V), all the backward needs."""
    probs: np.ndarray


class CrossEntropyCtx(NamedTuple):
    """Saved for backward.

    probs:           softmax(logits) (..., V); the gradient is probs minus the target
                     distribution, so they are kept rather than recomputed from the logits.
    targets:         (...) integer targets with ignored entries replaced by 0 (any valid class
                     would do: `valid` zeroes those rows), so they can index without a check.
    valid:           (...) bool, False where the target was ignore_index.
    n_valid:         how many positions count in the mean (0 when all are ignored).
    label_smoothing: eps, a Python float.
    """
    probs: np.ndarray
    targets: np.ndarray
    valid: np.ndarray
    n_valid: int
    label_smoothing: float


def log_softmax_forward(x: np.ndarray) -> tuple[np.ndarray, LogSoftmaxCtx]:
    """log softmax(x) over the last axis. x (..., V) -> logp (..., V).

    >>> logp, ctx = log_softmax_forward(np.array([0.0, 0.0]))
    >>> np.exp(logp).tolist(), ctx.probs.tolist()
    ([0.5, 0.5], [0.5, 0.5])
    """
    check_float("x", x)
    check_shape("x", x, ("...", "V"), {})
    if x.shape[-1] == 0:
        raise GlassformerError(f"expected x with at least one class (V >= 1), got {x.shape}")
    shifted = x - row_max(x)                        # (..., V), every entry <= 0: exp cannot overflow
    exps = np.exp(shifted)                          # (..., V)
    sum_exps = exps.sum(axis=-1, keepdims=True)     # (..., 1), >= 1 since the max contributes 1
    logp = shifted - np.log(sum_exps)               # (..., V)
    probs = exps / sum_exps                         # (..., V)
    return logp, LogSoftmaxCtx(probs=probs)


def log_softmax_backward(dlogp: np.ndarray, ctx: LogSoftmaxCtx) -> np.ndarray:
    """Returns dx (..., V) = dlogp - p * sum(dlogp) over the last axis."""
    total = dlogp.sum(axis=-1, keepdims=True)       # (..., V) -> (..., 1)
    return dlogp - ctx.probs * total


def _lead_letters(ndim: int) -> tuple[str, ...]:
    """Legend letters for the positions of logits with `ndim` dims: (N,) for (N, V), (B, T) ..."""
    return {2: ("N",), 3: ("B", "T")}.get(ndim, ("...",))


def _check_inputs(logits, targets, ignore_index) -> int:
    check_float("logits", logits)
    lead = _lead_letters(logits.ndim)
    sizes = check_shape("logits", logits, lead + ("V",), {})
    n_classes = logits.shape[-1]
    if n_classes == 0:
        raise GlassformerError(f"expected logits with at least one class (V >= 1), "
                               f"got {logits.shape}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise GlassformerError(f"expected ignore_index to be an integer, got {ignore_index!r}")
    check_ids("targets", targets, n_classes, label="target", ignore_index=int(ignore_index),
              table=f"the V={n_classes} classes of logits (and is not "
                    f"ignore_index={ignore_index})")
    check_shape("targets", targets, lead, sizes)
    return n_classes


def cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, *,
                          ignore_index: int = IGNORE_INDEX, label_smoothing: float = 0.0) -> tuple[np.ndarray, CrossEntropyCtx]:
    """Mean cross-entropy of softmax(logits) against integer targets, as torch computes it.

    logits (..., V) float, targets (...) integers in [0, V) or ignore_index -> loss, a 0-d array
    of the logits' dtype.

    >>> loss, ctx = cross_entropy_forward(np.zeros((2, 4)), np.array([1, -100]))
    >>> round(float(loss), 6), ctx.n_valid    # log(4): uniform guess, one counted position
    (1.386294, 1)
    """
    _check_inputs(logits, targets, ignore_index)
    eps = check_fraction("label_smoothing", label_smoothing, allow_one=True)
    logp, softmax_ctx = log_softmax_forward(logits)             # (..., V)
    valid = targets != ignore_index                             # (...) bool
    safe_targets = np.where(valid, targets, 0)                  # (...) every entry indexable
    target_logp = np.take_along_axis(logp, safe_targets[..., None], axis=-1)  # (..., 1)
    per_position = -target_logp[..., 0]                        # (..., 1) -> (...): nll
    if eps > 0.0:
        # note: only computed when asked for, so a -inf logit (a banned class) cannot turn
        # 0 * (-inf) into NaN in the unsmoothed loss.
        smooth = -logp.mean(axis=-1)                            # (..., V) -> (...)
        per_position = (1.0 - eps) * per_position + eps * smooth
    per_position = np.where(valid, per_position, 0.0)           # ignored positions add nothing
    n_valid = int(valid.sum())
    # subtle: with every target ignored torch divides 0 by 0 (NaN); we define the loss as 0.
    mean = per_position.sum() * (1.0 / n_valid) if n_valid else 0.0
    loss = np.array(mean, dtype=logits.dtype)                   # 0-d
    ctx = CrossEntropyCtx(probs=softmax_ctx.probs, targets=safe_targets, valid=valid,
                          n_valid=n_valid, label_smoothing=eps)
    return loss, ctx


def cross_entropy_backward(dloss: np.ndarray, ctx: CrossEntropyCtx) -> np.ndarray:
    """Returns dlogits (..., V) = (probs - q) * dloss / n_valid, zero rows where ignored."""
    eps = ctx.label_smoothing
    n_classes = ctx.probs.shape[-1]
    # Python float: a float32 loss gradient must not promote a float32 dlogits.
    scale = float(dloss) / ctx.n_valid if ctx.n_valid else 0.0
    probs_rows = ctx.probs.reshape(-1, n_classes)               # (..., V) -> (N, V)
    target_rows = ctx.targets.reshape(-1)                       # (...) -> (N,)
    # p - q, with q = (1 - eps) * onehot + eps / V, without building the one-hot array.
    dlogits = probs_rows - eps / n_classes                      # (N, V), a fresh array
    dlogits[np.arange(len(target_rows)), target_rows] -= 1.0 - eps
    valid_rows = ctx.valid.reshape(-1, 1)                       # (...) -> (N, 1)
    dlogits = np.where(valid_rows, dlogits * scale, 0.0)        # (N, V)
    return dlogits.reshape(ctx.probs.shape)                     # (N, V) -> (..., V)
