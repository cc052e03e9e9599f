"""The one explain framework: steps, parts, the run, and the finite-difference check.

A part (explain/parts/<topic>.py) explains one op, block or model. It is a `Part`:

    make_inputs(options, rng) -> Setup    small seeded inputs, the forward/backward pair to run
                                          (usually a gradcheck case from gradcheck/cases, so the
                                          op is called the way its gradient check calls it), and
                                          whatever the steps need (configs, a tokenizer)
    forward_steps(inputs, out, ctx, static) -> [Step]     read off ctx and the results
    backward_steps(dout, grads, ctx, static) -> [Step]
    text                                  {"en": {key: text}, "zh": {...}}: the part's own words

`run` calls the pair once (the library's forward and backward, unchanged), asks the part for its
steps, and with a backward pass runs `finite_difference_check`: the same pair in float64 on the
same inputs and upstream gradient, through `glassformer.gradcheck.gradcheck`. What is checked is
exactly what is shown. explain/render.py turns the `Result` into prose or JSON.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.gradcheck import gradcheck, numeric_gradient

LANGS = ("en", "zh")
# Central-difference step: truncation (~step^2) and float64 rounding (~1e-16 / step) balance here.
FD_STEP = 1e-6
# A float64 backward that is right matches central differences to ~1e-9; the bar shown on screen.
FD_TOLERANCE = 1e-6
# An analytic gradient whose entries are all below this is zero up to rounding (softmax under an
# upstream gradient of ones, a key bias). Relative error is noise over noise there, so the check
# compares absolute values instead.
ZERO_GRAD = 1e-10
# Int-valued options: every size must be at least 1.
SIZE_OPTIONS = ("batch", "seq", "d_model", "d_k", "heads", "kv_heads")

# Explanations shared by every part: the upstream gradient and a parameter's gradient.
COMMON_TEXT = {
    "en": {
        "G": "Upstream gradient G = dL/d(out). We pick L = sum(out * G), so dL/d(out) is G "
             "itself: all ones, or random with --grad random.",
        "dparam": "dL/d{param}: same shape as the parameter; an optimizer step moves {param} "
                  "against it.",
    },
    "zh": {
        "G": "上游梯度 G = dL/d(out)。取 L = sum(out * G)，于是 dL/d(out) 就是 G 本身："
             "全为 1，或用 --grad random 取随机值。",
        "dparam": "dL/d{param}：形状与该参数相同；优化器沿它的反方向更新 {param}。",
    },
}


def with_common(text: dict) -> dict:
    """A part's {"en": {...}, "zh": {...}} texts with COMMON_TEXT added to each language."""
    return {lang: {**COMMON_TEXT[lang], **text[lang]} for lang in LANGS}


class Step(NamedTuple):
    key: str                  # stable name: the JSON key
    value: Any                # an array, a number, or a list of strings / dicts (tokens, top-k)
    algebra: str              # how it was made, with shapes; the same in every language
    text: dict[str, str]      # its explanation per language, placeholders filled in
    show: str = "full"        # how render.py prints the value (see its docstring)


def step(texts: dict, key: str, value, algebra: str, *, text: str | None = None,
         show: str = "full", **fmt) -> Step:
    """A Step explained by `texts[lang][text]` (text defaults to key), with {fmt} filled in."""
    name = key if text is None else text
    return Step(key, value, algebra, {lang: texts[lang][name].format(**fmt) for lang in LANGS},
                show)


class Pair(NamedTuple):
    """A forward/backward pair; a gradcheck case has the same two fields and is used as one.

    forward(inputs) -> (out, ctx);  backward(dout, ctx) -> {input name: gradient}.
    """
    forward: Callable
    backward: Callable


class Setup(NamedTuple):
    inputs: dict              # named arrays (ids, masks and the like included)
    pair: Any                 # a Pair or a GradcheckCase: what runs on `inputs`
    static: dict              # the rest of the setup: configs, param names, a tokenizer
    checked: tuple | None = None  # gradients the check covers; None: all; (): no check


class Part(NamedTuple):
    name: str
    defaults: dict            # every option that applies, with its default
    make_inputs: Callable     # (options, rng) -> Setup
    forward_steps: Callable   # (inputs, out, ctx, static) -> [Step]
    backward_steps: Callable  # (dout, grads, ctx, static) -> [Step]
    text: dict                # {"en": {...}, "zh": {...}}; "title" names the part in headings
    fd_step: float = FD_STEP  # the check's central-difference step
    headings: Callable | None = None  # (options, lang) -> (forward, backward) heading lines;
                                      # None: "<title>: forward pass" and "...: backward pass"
    verdict: bool = True      # whether the check line ends in OK / MISMATCH


class Check(NamedTuple):
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
        zero_ok = all(err < FD_TOLERANCE for err in self.zero_err.values())
        return self.max_rel_err < FD_TOLERANCE and zero_ok


class Result(NamedTuple):
    part: Part
    options: dict
    forward: list[Step]
    backward: list[Step] | None       # None unless the backward pass was asked for
    check: Check | None               # None without a backward pass, or when Setup says so


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


def upstream_gradient(kind: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """G for L = sum(out * G): all ones, or standard normal from `rng`."""
    if kind == "ones":
        return np.ones(shape, dtype=np.float32)
    return rng.standard_normal(shape).astype(np.float32)


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


def finite_difference_check(setup: Setup, dout: np.ndarray, grads: dict,
                            fd_step: float = FD_STEP) -> Check | None:
    """The setup's own pair in float64 vs central differences of L = sum(out * G).

    grads: the float32 gradients already computed; they say which inputs have one (in input
    order) when `setup.checked` is None.
    """
    if setup.checked == ():
        return None
    names = setup.checked or [name for name in setup.inputs if name in grads]
    inputs64 = _as_float64(setup.inputs)
    dout64 = np.asarray(dout, dtype=np.float64)
    forward = setup.pair.forward

    def backward(grad, ctx):
        all_grads = setup.pair.backward(grad, ctx)
        return {name: all_grads[name] for name in names}

    rel_err = gradcheck(forward, backward, inputs64, dout=dout64, eps=fd_step)
    analytic = backward(dout64, forward(inputs64)[1])
    zero_err = {}
    for name in names:
        if np.max(np.abs(analytic[name]), initial=0.0) < ZERO_GRAD:
            numeric = numeric_gradient(forward, inputs64, name, dout64, fd_step)
            zero_err[name] = float(np.max(np.abs(numeric - analytic[name]), initial=0.0))
            del rel_err[name]
    return Check(rel_err=rel_err, zero_err=zero_err)


def run(part: Part, options: dict, rng: np.random.Generator, *, grad: str | None) -> Result:
    """Forward steps always; with grad ("ones" or "random") the backward steps and the check."""
    setup = part.make_inputs(options, rng)
    out, ctx = setup.pair.forward(setup.inputs)
    forward_steps = part.forward_steps(setup.inputs, out, ctx, setup.static)
    if grad is None:
        return Result(part, options, forward_steps, None, None)
    dout = upstream_gradient(grad, np.shape(out), rng)
    grads = setup.pair.backward(dout, ctx)
    backward_steps = part.backward_steps(dout, grads, ctx, setup.static)
    check = finite_difference_check(setup, dout, grads, part.fd_step)
    return Result(part, options, forward_steps, backward_steps, check)
