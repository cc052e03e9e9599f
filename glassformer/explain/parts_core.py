"""The shared machinery of `glassformer explain PART`: steps, parts, options, the run and the check.

A part is a thin adapter around one library op, block or model:

    make_inputs(options, rng) -> (inputs, static)   small seeded arrays; static: configs, tokenizer
    forward(inputs, static)   -> (out, ctx)         the library's forward, called unchanged
    backward(dout, ctx, static) -> {input: grad}    the library's backward, called unchanged
    forward_steps(...)  / backward_steps(...)       what to show, read off ctx and the results
    checked(inputs, static) -> names or None        which gradients the finite-difference check
                                                    covers (None: no check, e.g. a loaded model)

The same forward/backward pair, run in float64 on the same inputs with the same upstream gradient,
feeds `glassformer.gradcheck.gradcheck`, so what is checked is exactly what is shown.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.walkthrough import upstream_gradient
from glassformer.gradcheck import gradcheck, numeric_gradient

# Central-difference step: truncation (~step^2) and float64 rounding (~1e-16 / step) balance here.
PART_FD_STEP = 1e-6
# A float64 backward that is right matches central differences to ~1e-9; the bar shown on screen.
PART_FD_TOLERANCE = 1e-6
# An analytic gradient whose entries are all below this is zero up to rounding (softmax under an
# upstream gradient of ones, say). Relative error is noise over noise there, so the check
# compares absolute values instead.
ZERO_GRAD = 1e-10
# Int-valued options: every size must be at least 1.
SIZE_OPTIONS = ("batch", "seq", "d_model", "heads", "kv_heads")


class PartStep(NamedTuple):
    key: str                  # stable name: the JSON key
    value: Any                # an array, a number, or a list of strings (token pieces)
    algebra: str              # how it was made, with shapes; the same in every language
    text: str                 # key of its explanation in parts_text (often == key)
    show: str = "full"        # "full" matrix, "line" (shape, first values, mean/std), "heads"
    fmt: dict | None = None   # fields for the explanation's {placeholders}


def step(key: str, value, algebra: str, *, text: str | None = None, show: str = "full",
         **fmt) -> PartStep:
    """A PartStep whose explanation key defaults to its JSON key."""
    return PartStep(key, value, algebra, key if text is None else text, show, fmt or None)


class Part(NamedTuple):
    name: str
    defaults: dict                       # every option that applies, with its default
    make_inputs: Callable
    forward: Callable
    backward: Callable
    forward_steps: Callable
    backward_steps: Callable
    checked: Callable


class FDCheck(NamedTuple):
    """Finite-difference check of the gradients shown.

    rel_err:  relative error per checked input (gradcheck's norm-wise measure).
    zero_err: for inputs whose analytic gradient is zero up to rounding: max |numeric|, an
              absolute error (a relative one would compare rounding noise with rounding noise).
    """
    rel_err: dict[str, float]
    zero_err: dict[str, float]

    @property
    def max_rel_err(self) -> float:
        return max(self.rel_err.values(), default=0.0)

    @property
    def ok(self) -> bool:
        zero_ok = all(err < PART_FD_TOLERANCE for err in self.zero_err.values())
        return self.max_rel_err < PART_FD_TOLERANCE and zero_ok


class PartResult(NamedTuple):
    part: str
    options: dict
    forward: list[PartStep]
    backward: list[PartStep] | None       # None unless the backward pass was asked for
    check: FDCheck | None                 # None without --backward, or when `checked` says so


def shape_of(a) -> str:
    """(1, 3, 4) written compactly as "(1,3,4)"; (4,) stays "(4,)"."""
    dims = [str(n) for n in np.shape(a)]
    return "(" + ",".join(dims) + ("," if len(dims) == 1 else "") + ")"


def normal(rng: np.random.Generator, shape, std: float = 1.0, mean: float = 0.0) -> np.ndarray:
    """A float32 N(mean, std^2) draw."""
    return (rng.standard_normal(shape) * std + mean).astype(np.float32)


def lively(params: dict, rng: np.random.Generator, *, std: float) -> dict:
    """Redraw a fresh init so every number is visible: weights ~ N(0, std^2), norm scales
    ~ 1 + N(0, 0.3^2), biases ~ N(0, 0.3^2). Same keys, shapes and dtype (float32).

    note: GPT-2's own init (std 0.02, scales 1, biases 0) makes attention uniform and norms
    pass-through, so a trace of it would show little; the shapes are what we keep from it.
    """
    out = {}
    for name, value in params.items():
        leaf = name.rsplit(".", 1)[-1]
        if "norm" in name and leaf == "w":
            out[name] = normal(rng, value.shape, 0.3, 1.0)
        elif leaf.startswith("b"):
            out[name] = normal(rng, value.shape, 0.3)
        else:
            out[name] = normal(rng, value.shape, std)
    return out


def resolve_options(part: Part, given: dict) -> dict:
    """The part's defaults overridden by the options given (None = not given).

    An option given to a part it does not apply to is an error, not silently ignored.
    """
    resolved = dict(part.defaults)
    for name, value in given.items():
        if value is None:
            continue
        if name not in part.defaults:
            takes = ", ".join("--" + key.replace("_", "-") for key in part.defaults) or "none"
            raise GlassformerError(f"--{name.replace('_', '-')} does not apply to "
                                   f"{part.name} (it takes: {takes})")
        if name in SIZE_OPTIONS and value < 1:
            raise GlassformerError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        resolved[name] = value
    return resolved


def _as_float64(inputs: dict) -> dict:
    """Float arrays widened to float64; ids, masks and everything else as they are."""
    return {name: value.astype(np.float64)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" else value
            for name, value in inputs.items()}


def finite_difference_check(part: Part, inputs: dict, static: dict,
                            dout: np.ndarray) -> FDCheck | None:
    """The part's own forward/backward in float64 vs central differences, L = sum(out * G)."""
    names = part.checked(inputs, static)
    if names is None:
        return None
    inputs64 = _as_float64(inputs)
    dout64 = np.asarray(dout, dtype=np.float64)

    def forward(inp):
        return part.forward(inp, static)

    def backward(grad, ctx):
        grads = part.backward(grad, ctx, static)
        return {name: grads[name] for name in names}

    rel_err = gradcheck(forward, backward, inputs64, dout=dout64, eps=PART_FD_STEP)
    analytic = backward(dout64, forward(inputs64)[1])
    zero_err = {}
    for name in names:
        if np.max(np.abs(analytic[name]), initial=0.0) < ZERO_GRAD:
            numeric = numeric_gradient(forward, inputs64, name, dout64, PART_FD_STEP)
            zero_err[name] = float(np.max(np.abs(numeric - analytic[name]), initial=0.0))
            del rel_err[name]
    return FDCheck(rel_err=rel_err, zero_err=zero_err)


def run_part(part: Part, options: dict, rng: np.random.Generator, *,
             grad: str | None) -> PartResult:
    """Forward steps always; with grad ("ones" or "random") the backward steps and the check."""
    inputs, static = part.make_inputs(options, rng)
    out, ctx = part.forward(inputs, static)
    forward_steps = part.forward_steps(inputs, out, ctx, static)
    if grad is None:
        return PartResult(part.name, options, forward_steps, None, None)
    dout = upstream_gradient(grad, np.shape(out), rng)
    grads = part.backward(dout, ctx, static)
    backward_steps = part.backward_steps(dout, grads, ctx, static)
    check = finite_difference_check(part, inputs, static, dout)
    return PartResult(part.name, options, forward_steps, backward_steps, check)
