"""Elementwise activations, forward and backward: GELU (exact and tanh), ReLU, SiLU, sigmoid.

Every op here maps (...) -> (...) elementwise, so each backward is dout times the local slope.
GELU and SiLU both have the form out = x * g(x) for a smooth gate g, with slope g + x g'(x):

    gelu, approximate="none"   g = Phi(x) = (1 + erf(x / sqrt 2)) / 2     g' = phi(x) = exp(-x^2/2) / sqrt(2 pi)
    gelu, approximate="tanh"   g = (1 + tanh(u)) / 2 = sigmoid(2u),  u = sqrt(2/pi) (x + 0.044715 x^3)
                               g' = (1 - tanh(u)^2) / 2 * du/dx = 2 g (1 - g) * du/dx
    silu (a.k.a. swish-1)      g = sigmoid(x)                          g' = g (1 - g)
    relu                       out = max(x, 0)                          slope 1 where x > 0, else 0
    sigmoid                    out = s = 1 / (1 + exp(-x))               slope s (1 - s)
                               (a gate on its own: DeepSeek-V3's router scores, Qwen2-MoE's
                               shared-expert gate; blocks/moe.py)

References matched: `torch.nn.functional.gelu(x, approximate="none" | "tanh")`, `relu`, `silu`.
GELU is Hendrycks & Gimpel (2016); "tanh" is their fast approximation, which GPT-2 uses (HF calls it
`gelu_new`), and BERT uses the exact form. ReLU's slope at exactly 0 is taken as 0, as torch does.

What ctx keeps: GELU keeps only its local slope g + x g'(x), computed in the forward while x is
still in cache, so its backward is a single product dout * slope. (Keeping x and g instead and
building the slope in the backward took ten passes over (B, T, F) there; the array the next
matrix product reads then came back from memory, and a training step was slower: figures in
docs/performance.md.)
SiLU keeps x and the gate g (same shape and dtype as x): g is the costly part to recompute (an
exp). Sigmoid keeps its output s, the whole slope. ReLU keeps only the boolean mask x > 0 (one byte per element instead of four or eight).

Precision: float64 input evaluates erf in float64 with Cody's fits (ops/_erf.py), as the float64
gradient checks need. float32 input stays in float32: Phi comes from the density phi(x), which the
slope needs anyway, times Mills' ratio M(|x|) (`normal_upper_tail`), with the sign handled on the
bits so that the left tail keeps its relative accuracy. Against 0.5 x erfc(-x / sqrt 2) in float64
on [-12, 12] the float32 GELU is within 2e-6 relative where |GELU| >= 1e-6 (figures in
docs/performance.md). Derivations: docs/derivations/activation.md.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float
from glassformer.ops._erf import erfc, normal_upper_tail

_GELU_MODES = ("none", "tanh")
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SIGN_BIT = np.uint32(0x80000000)    # a float32's sign, as bits
_CUBIC = 0.044715        # the tanh approximation's cubic coefficient, as in the GELU paper and GPT-2
_MINUS_TWO_U_LINEAR = -2.0 * _SQRT_2_OVER_PI            # -2u = x (this + next * x^2)
_MINUS_TWO_U_CUBIC = -2.0 * _SQRT_2_OVER_PI * _CUBIC


class GeluCtx(NamedTuple):
    """Saved by `gelu_forward`.

    slope:  d out / d x = g + x g'(x) at every element (x's shape and dtype), with g and g' as
            in the module docstring for the chosen `approximate`. Backward is dout * slope.
            None when the forward was asked not to keep it (inference: no backward follows).
    """
    slope: np.ndarray | None


class ReluCtx(NamedTuple):
    """Saved by `relu_forward`: where the input was positive (the only places gradient flows)."""
    positive: np.ndarray    # bool, x's shape


class SiluCtx(NamedTuple):
    """Saved by `silu_forward`: the input and its sigmoid (so backward needs no second exp)."""
    x: np.ndarray
    sigmoid: np.ndarray     # x's shape and dtype


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), in three passes over x.

    note: for x below about -88 (float32) exp(-x) overflows to inf and 1 / (1 + inf) = 0, which is
    the correctly rounded limit, so the overflow warning is silenced rather than avoided with a
    two-branch formula (that one costs several times more passes).
    """
    with np.errstate(over="ignore"):
        denom = np.exp(-x)
    denom += 1.0
    return np.reciprocal(denom, out=denom)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = erfc(-x / sqrt 2) / 2, in x's dtype.

    note: erfc keeps relative accuracy in the left tail, where the textbook (1 + erf) / 2 cancels
    to 0 (Phi(-10) ~ 7.6e-24 survives here); the two agree everywhere else.
    """
    cdf = 0.5 * erfc(-x * _INV_SQRT2)                  # float64 inside erfc
    return cdf.astype(x.dtype, copy=False)


def gelu_forward(x: np.ndarray, *, approximate: str = "none", keep_slope: bool = True
                 ) -> tuple[np.ndarray, GeluCtx]:
    """GELU(x) = x * Phi(x), or GPT-2's tanh approximation. (...) -> (...), x's dtype.

    ctx keeps the slope g + x g'(x) for backward (see the module docstring); keep_slope=False
    skips it (about half the passes over x) when no backward will run, as in cached generation.

    >>> out, ctx = gelu_forward(np.array([-1.0, 0.0, 1.0]))
    >>> np.round(out, 6).tolist(), np.round(ctx.slope, 6).tolist()
    ([-0.158655, 0.0, 0.841345], [-0.083315, 0.5, 1.083315])
    """
    check_float("x", x)
    if approximate not in _GELU_MODES:
        raise GlassformerError(f"expected approximate to be 'none' or 'tanh', got {approximate!r}")
    if approximate == "none" and x.dtype == np.float32:
        return _gelu_float32(x, keep_slope)
    if not keep_slope:
        gate = _normal_cdf(x) if approximate == "none" else _sigmoid_two_u(x, x * x)
        return np.multiply(x, gate, out=gate), GeluCtx(slope=None)
    if approximate == "none":
        gate = _normal_cdf(x)                                  # Phi(x)
        slope = x * x
        slope *= -0.5
        np.exp(slope, out=slope)
        slope *= _INV_SQRT_2PI                                 # phi(x), the normal density
        slope *= x
        slope += gate                                          # Phi(x) + x phi(x)
    else:
        square = x * x                                         # x^2, for the gate and the slope
        gate = _sigmoid_two_u(x, square)
        slope = _tanh_gate_slope(x, gate, square)              # written over `square`
    out = np.multiply(x, gate, out=gate)                       # the gate is not kept
    return out, GeluCtx(slope=slope)


def _gelu_float32(x: np.ndarray, keep_slope: bool) -> tuple[np.ndarray, GeluCtx]:
    """The exact GELU on float32 x, in float32: x Phi(x) and the slope Phi(x) + x phi(x).

    1 - Phi(|x|) = phi(x) M(|x|) (the tail, ops/_erf.py); then Phi(x) = tail for x < 0 and
    1 - tail for x >= 0. Written as gate = [x >= 0] - (tail carrying x's sign): the sign is OR-ed
    into the tail's bits, so for x < 0 the gate is 0 - (-tail), exact, and a tiny tail keeps its
    relative accuracy (np.where or a masked subtract cost 20-40x a pass here; this costs four).
    """
    density = x * x
    density *= -0.5
    np.exp(density, out=density)
    density *= _INV_SQRT_2PI                                   # phi(x)
    tail = normal_upper_tail(np.abs(x), density)               # 1 - Phi(|x|)
    bits = x.view(np.uint32)
    sign_clear = bits < _SIGN_BIT                              # x >= 0, +0.0 included
    tail_bits = tail.view(np.uint32)
    tail_bits |= bits & _SIGN_BIT                              # -tail where x < 0
    gate = np.subtract(sign_clear, tail, out=tail)             # Phi(x)
    out = x * gate
    if not keep_slope:
        return out, GeluCtx(slope=None)
    slope = np.multiply(x, density, out=density)
    slope += gate                                              # Phi(x) + x phi(x)
    return out, GeluCtx(slope=slope)


def _sigmoid_two_u(x: np.ndarray, square: np.ndarray) -> np.ndarray:
    """The tanh form's gate g = (1 + tanh u) / 2 = sigmoid(2u), in one new array, six passes.

    square: x^2 (only read). -2u = x (a + b x^2) with a = -2 sqrt(2/pi), b = a * 0.044715.
    note: (1 + tanh u) / 2 = 1 / (1 + exp(-2u)) exactly; the sigmoid form avoids the cancellation
    of 1 + tanh u when tanh u ~ -1 (x < -3), where float32 would keep no correct digit of g.
    """
    gate = square * _MINUS_TWO_U_CUBIC
    gate += _MINUS_TWO_U_LINEAR
    gate *= x                                  # -2u
    with np.errstate(over="ignore"):           # exp -> inf for x << 0 gives g = 0, the limit
        np.exp(gate, out=gate)
    gate += 1.0
    return np.reciprocal(gate, out=gate)       # g = sigmoid(2u)


def _tanh_gate_slope(x: np.ndarray, gate: np.ndarray, square: np.ndarray) -> np.ndarray:
    """g + x g'(x) for the tanh form, written over `square` (x^2): g (1 + x (1 - g) 2 du/dx).

    1 - tanh(u)^2 = 4 g (1 - g), so g' = 2 g (1 - g) du/dx: no tanh(u) is needed.
    """
    slope = square
    slope *= 6.0 * _SQRT_2_OVER_PI * _CUBIC
    slope += 2.0 * _SQRT_2_OVER_PI             # 2 du/dx = 2 sqrt(2/pi) (1 + 3 k x^2)
    slope *= x
    slope *= np.subtract(1.0, gate)
    slope += 1.0
    slope *= gate
    return slope


def gelu_backward(dout: np.ndarray, ctx: GeluCtx, *, out: np.ndarray | None = None
                  ) -> np.ndarray:
    """dx = dout * (g + x g'(x)), the slope kept by the forward. (...) -> (...).

    out: where to write dx (dout itself, when the caller owns it: the MLP's fresh product),
    so the backward allocates no (..., F) array; None: a new one."""
    if ctx.slope is None:
        raise GlassformerError("this GELU forward ran with keep_slope=False (inference): it "
                               "kept nothing to run backward with")
    return np.multiply(dout, ctx.slope, out=out)


def relu_forward(x: np.ndarray) -> tuple[np.ndarray, ReluCtx]:
    """max(x, 0). (...) -> (...), x's dtype.

    >>> out, ctx = relu_forward(np.array([-2.0, 0.0, 3.0]))
    >>> out.tolist(), ctx.positive.tolist()
    ([0.0, 0.0, 3.0], [False, False, True])
    """
    check_float("x", x)
    positive = x > 0.0
    out = np.where(positive, x, 0.0)          # a Python 0.0 keeps float32 float32 (NumPy 2)
    return out, ReluCtx(positive=positive)


def relu_backward(dout: np.ndarray, ctx: ReluCtx) -> np.ndarray:
    """dx = dout where x > 0, else 0 (also at x == 0, as torch). (...) -> (...)."""
    return np.where(ctx.positive, dout, 0.0)


def silu_forward(x: np.ndarray) -> tuple[np.ndarray, SiluCtx]:
    """SiLU(x) = x * sigmoid(x) (swish with beta = 1). (...) -> (...), x's dtype.

    >>> out, _ = silu_forward(np.array([0.0, 1.0]))
    >>> np.round(out, 6).tolist()
    [0.0, 0.731059]
    """
    check_float("x", x)
    sigmoid = _sigmoid(x)
    return x * sigmoid, SiluCtx(x=x, sigmoid=sigmoid)


def silu_backward(dout: np.ndarray, ctx: SiluCtx) -> np.ndarray:
    """dx = dout * s (1 + x (1 - s)), s = sigmoid(x). (...) -> (...)."""
    s = ctx.sigmoid
    return dout * (s * (1.0 + ctx.x * (1.0 - s)))


class SigmoidCtx(NamedTuple):
    """Saved by `sigmoid_forward`: its output s, from which the slope s (1 - s) is made."""
    out: np.ndarray         # x's shape and dtype


def sigmoid_forward(x: np.ndarray) -> tuple[np.ndarray, SigmoidCtx]:
    """1 / (1 + exp(-x)). (...) -> (...), x's dtype.

    >>> out, _ = sigmoid_forward(np.array([0.0, 2.0]))
    >>> np.round(out, 6).tolist()
    [0.5, 0.880797]
    """
    check_float("x", x)
    out = _sigmoid(x)
    return out, SigmoidCtx(out=out)


def sigmoid_backward(dout: np.ndarray, ctx: SigmoidCtx) -> np.ndarray:
    """dx = dout * s (1 - s). (...) -> (...)."""
    s = ctx.out
    return dout * (s * (1.0 - s))
