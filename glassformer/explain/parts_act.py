"""`explain gelu`, `explain silu` and `explain swiglu`: ops/activation.py and ops/swiglu.py.

GELU and SiLU are out = x * gate(x). GELU's ctx keeps its local slope gate + x gate'(x) and SiLU's
keeps the sigmoid gate; each is shown as it is. SwiGLU's ctx keeps silu(gate), the linear branch
`up`, and SiLU's own ctx (with the sigmoid).
"""
from __future__ import annotations

from glassformer.explain.parts_core import Part, normal, shape_of, step
from glassformer.ops.activation import (gelu_backward, gelu_forward, silu_backward,
                                        silu_forward)
from glassformer.ops.swiglu import swiglu_backward, swiglu_forward

SIZES = {"batch": 1, "seq": 3, "d_model": 4}
# Spread of the random inputs: wide enough to reach both the flat (x << 0) and the linear
# (x >> 0) parts of each curve.
INPUT_STD = 2.0

SLOPE_ALGEBRA = {
    "none": "Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2",
    "tanh": "g (1 + x (1 - g) 2 du/dx), g = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)",
}
OUT_ALGEBRA = {"none": "x * Phi(x)", "tanh": "x * g"}


def _x_inputs(options: dict, rng):
    shape = (options["batch"], options["seq"], options["d_model"])
    return {"x": normal(rng, shape, std=INPUT_STD)}, {"approximate": options.get("approximate")}


def _x_only(inputs, static):
    return ["x"]


def _dx_steps(dout, grads, ctx, static):
    return [step("G", dout, shape_of(dout), text="common:G"),
            step("dx", grads["x"], f"G * slope: {shape_of(grads['x'])}")]


# ---------------------------------------------------------------- gelu

def _gelu_forward(inputs, static):
    return gelu_forward(inputs["x"], approximate=static["approximate"])


def _gelu_backward(dout, ctx, static):
    return {"x": gelu_backward(dout, ctx)}


def _gelu_steps(inputs, out, ctx, static):
    mode = static["approximate"] or "none"
    return [step("x", inputs["x"], shape_of(inputs["x"])),
            step("slope", ctx.slope, f"{SLOPE_ALGEBRA[mode]}: {shape_of(ctx.slope)}  (ctx.slope)",
                 text=f"slope_{mode}"),
            step("out", out, f"{OUT_ALGEBRA[mode]}: {shape_of(out)}", text=f"out_{mode}")]


GELU = Part(name="gelu", defaults={**SIZES, "approximate": "none"}, make_inputs=_x_inputs,
            forward=_gelu_forward, backward=_gelu_backward, forward_steps=_gelu_steps,
            backward_steps=_dx_steps, checked=_x_only)


# ---------------------------------------------------------------- silu

def _silu_forward(inputs, static):
    return silu_forward(inputs["x"])


def _silu_backward(dout, ctx, static):
    return {"x": silu_backward(dout, ctx)}


def _silu_steps(inputs, out, ctx, static):
    return [step("x", inputs["x"], shape_of(inputs["x"])),
            step("sigmoid", ctx.sigmoid, f"1 / (1 + exp(-x)): {shape_of(ctx.sigmoid)}  "
                                         f"(ctx.sigmoid)"),
            step("out", out, f"x * sigmoid: {shape_of(out)}")]


def _silu_backward_steps(dout, grads, ctx, static):
    return [step("G", dout, shape_of(dout), text="common:G"),
            step("dx", grads["x"], f"G * s (1 + x (1 - s)), s = sigmoid: "
                                   f"{shape_of(grads['x'])}")]


SILU = Part(name="silu", defaults=dict(SIZES), make_inputs=_x_inputs, forward=_silu_forward,
            backward=_silu_backward, forward_steps=_silu_steps,
            backward_steps=_silu_backward_steps, checked=_x_only)


# ---------------------------------------------------------------- swiglu

def _swiglu_inputs(options: dict, rng):
    shape = (options["batch"], options["seq"], options["d_model"])   # (B, T, F)
    return {"gate": normal(rng, shape, std=INPUT_STD), "up": normal(rng, shape)}, {}


def _swiglu_forward(inputs, static):
    return swiglu_forward(inputs["gate"], inputs["up"])


def _swiglu_backward(dout, ctx, static):
    dgate, dup = swiglu_backward(dout, ctx)
    return {"gate": dgate, "up": dup}


def _swiglu_steps(inputs, out, ctx, static):
    shape = shape_of(out)
    return [step("gate", inputs["gate"], f"x @ w_gate: {shape}"),
            step("up", inputs["up"], f"x @ w_up: {shape}"),
            step("sigmoid", ctx.silu.sigmoid, f"sigmoid(gate): {shape}  (ctx.silu.sigmoid)"),
            step("activated", ctx.activated, f"gate * sigmoid(gate): {shape}  (ctx.activated)"),
            step("out", out, f"silu(gate) * up: {shape}")]


def _swiglu_backward_steps(dout, grads, ctx, static):
    shape = shape_of(dout)
    return [step("G", dout, shape, text="common:G"),
            step("dup", grads["up"], f"G * silu(gate): {shape}"),
            step("dgate", grads["gate"], f"silu backward of (G * up): {shape}")]


def _gate_and_up(inputs, static):
    return ["gate", "up"]


SWIGLU = Part(name="swiglu", defaults=dict(SIZES), make_inputs=_swiglu_inputs,
              forward=_swiglu_forward, backward=_swiglu_backward, forward_steps=_swiglu_steps,
              backward_steps=_swiglu_backward_steps, checked=_gate_and_up)
