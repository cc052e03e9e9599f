"""Central-difference gradient checking in float64, for any forward/backward pair.

For a forward f and a random upstream gradient G (same shape as f's output), the scalar

    L(x) = sum(f(x) * G)

has dL/dx = backward(G). Each input element is nudged by +-eps and

    numeric = (L(x + eps) - L(x - eps)) / (2 eps)

is compared with the analytic value. The error reported per input is

    rel_err = ||analytic - numeric|| / max(||analytic|| + ||numeric||, tiny)

(2-norms over the whole input), which is ~1e-10 for a correct float64 backward and O(1) for a
wrong one. Never build a Jacobian: this checks the vector-Jacobian product directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

# A float64 backward that is right gives ~1e-9 or better; anything above this is a bug.
DEFAULT_TOLERANCE = 1e-6
# Step for central differences: the truncation error (~eps^2) and rounding (~1e-16/eps) balance
# near 1e-6 in float64.
DEFAULT_EPS = 1e-6
# Guards the division when both gradients are exactly zero (e.g. a fully masked attention row).
_TINY = 1e-30

Inputs = dict[str, np.ndarray]
ForwardFn = Callable[[Inputs], tuple[np.ndarray, Any]]
BackwardFn = Callable[[np.ndarray, Any], dict[str, np.ndarray]]


@dataclass(frozen=True)
class GradcheckCase:
    """One op in one mode: how to make float64 inputs, run forward, and run backward.

    make_inputs(rng) -> dict of named arrays (ids, masks and other non-float inputs allowed).
    forward(inputs) -> (out, ctx).
    backward(dout, ctx) -> dict of gradients, keyed by the input names that are checked.
    """
    name: str
    mode: str
    make_inputs: Callable[[np.random.Generator], Inputs]
    forward: ForwardFn
    backward: BackwardFn


@dataclass(frozen=True)
class CaseResult:
    name: str
    mode: str
    max_rel_err: float
    per_input: dict[str, float]
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.max_rel_err < self.tolerance)


def relative_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """||a - n|| / (||a|| + ||n||), 0 when both are exactly zero."""
    diff = float(np.linalg.norm(np.ravel(analytic - numeric)))
    size = float(np.linalg.norm(np.ravel(analytic)) + np.linalg.norm(np.ravel(numeric)))
    return diff / max(size, _TINY)


def _loss(forward: ForwardFn, inputs: Inputs, dout: np.ndarray) -> float:
    out, _ = forward(inputs)
    return float(np.sum(out * dout))


def numeric_gradient(forward: ForwardFn, inputs: Inputs, name: str, dout: np.ndarray,
                     eps: float = DEFAULT_EPS) -> np.ndarray:
    """d sum(forward(inputs) * dout) / d inputs[name], element by element (small inputs only)."""
    x = inputs[name]
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        original = x[index]
        nudged = x.copy()
        nudged[index] = original + eps
        plus = _loss(forward, {**inputs, name: nudged}, dout)
        nudged[index] = original - eps
        minus = _loss(forward, {**inputs, name: nudged}, dout)
        grad[index] = (plus - minus) / (2.0 * eps)
    return grad


def gradcheck(forward: ForwardFn, backward: BackwardFn, inputs: Inputs, *,
              seed: int = 0, eps: float = DEFAULT_EPS,
              dout: np.ndarray | None = None) -> dict[str, float]:
    """Relative error of backward vs central differences, per checked input (float64 only).

    `dout` is the upstream gradient G; by default a standard normal draw from `seed`.
    Returns {input name: rel_err} for every name that `backward` returns a gradient for.
    """
    for name, x in inputs.items():
        if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype != np.float64:
            raise ValueError(f"gradcheck needs float64 inputs; {name} is {x.dtype}")
    out, ctx = forward(inputs)
    if dout is None:
        dout = np.random.default_rng(seed).standard_normal(np.shape(out))
    dout = np.asarray(dout, dtype=np.float64)
    analytic = backward(dout, ctx)
    errors = {}
    for name, grad in analytic.items():
        numeric = numeric_gradient(forward, inputs, name, dout, eps)
        errors[name] = relative_error(grad, numeric)
    return errors


def run_case(case: GradcheckCase, *, seed: int = 0,
             tolerance: float = DEFAULT_TOLERANCE) -> CaseResult:
    """Make the case's inputs with `seed` and gradcheck it."""
    inputs = case.make_inputs(np.random.default_rng(seed))
    per_input = gradcheck(case.forward, case.backward, inputs, seed=seed)
    worst = max(per_input.values(), default=0.0)
    return CaseResult(name=case.name, mode=case.mode, max_rel_err=worst,
                      per_input=per_input, tolerance=tolerance)
