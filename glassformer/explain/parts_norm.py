"""`explain layer_norm` and `explain rms_norm`: ops/layer_norm.py and ops/rms_norm.py, step by step.

Each op keeps only xhat and rstd in its ctx (all its backward needs). The steps the op does not
keep are read back off those two, never recomputed from x:

    centered = xhat / rstd          (the op made xhat = centered * rstd)
    mean     = x - centered         (the same number in every column of a row; column 0 is shown)
    var      = 1 / rstd^2 - eps     (the op made rstd = 1 / sqrt(var + eps))

so the printed mean and var are the ones the op used, and a wrong op would show wrong ones.
"""
from __future__ import annotations

from glassformer.explain.parts_core import Part, normal, shape_of, step
from glassformer.ops.layer_norm import layer_norm_backward, layer_norm_forward
from glassformer.ops.rms_norm import rms_norm_backward, rms_norm_forward

LAYER_NORM_EPS = 1e-5   # GPT-2's and torch's default
RMS_NORM_EPS = 1e-6     # LLaMA's


def _inputs(options: dict, rng, *, bias: bool):
    b, t, c = options["batch"], options["seq"], options["d_model"]
    # An offset and a spread per row, so that centering and scaling both visibly do something.
    inputs = {"x": normal(rng, (b, t, c), std=2.0, mean=1.0),          # (B, T, C)
              "w": normal(rng, (c,), std=0.3, mean=1.0)}               # (C,)
    if bias:
        inputs["b"] = normal(rng, (c,), std=0.3)                       # (C,)
    return inputs, {}


def _layer_norm_inputs(options: dict, rng):
    return _inputs(options, rng, bias=True)


def _rms_norm_inputs(options: dict, rng):
    return _inputs(options, rng, bias=False)


def _layer_norm_forward(inputs, static):
    return layer_norm_forward(inputs["x"], inputs["w"], inputs["b"], eps=LAYER_NORM_EPS)


def _layer_norm_backward(dout, ctx, static):
    dx, dw, db = layer_norm_backward(dout, ctx)
    return {"x": dx, "w": dw, "b": db}


def _layer_norm_steps(inputs, y, ctx, static):
    x = inputs["x"]
    centered = ctx.xhat / ctx.rstd                      # read off: xhat = centered * rstd
    mean = (x - centered)[..., :1]                      # (B, T, C) -> (B, T, 1), read off
    var = 1.0 / (ctx.rstd * ctx.rstd) - LAYER_NORM_EPS  # read off: rstd = 1/sqrt(var + eps)
    rows = shape_of(ctx.rstd)
    return [
        step("x", x, shape_of(x)),
        step("w", inputs["w"], shape_of(inputs["w"])),
        step("b", inputs["b"], shape_of(inputs["b"])),
        step("mean", mean, f"{shape_of(x)} -> {rows}  (read off ctx: x - xhat / rstd)"),
        step("centered", centered, f"{shape_of(x)} - {rows} -> {shape_of(x)}  "
                                   f"(read off ctx: xhat / rstd)"),
        step("var", var, f"mean of centered^2 over C: {rows}  (read off ctx: 1/rstd^2 - eps)"),
        step("rstd", ctx.rstd, f"1/sqrt(var + eps), eps={LAYER_NORM_EPS}: {rows}  (ctx.rstd)"),
        step("xhat", ctx.xhat, f"{shape_of(x)} * {rows} -> {shape_of(x)}  (ctx.xhat)"),
        step("y", y, f"{shape_of(x)} * (C,) + (C,) -> {shape_of(y)}"),
    ]


def _layer_norm_backward_steps(dout, grads, ctx, static):
    return [
        step("G", dout, shape_of(dout), text="common:G"),
        step("dx", grads["x"], f"rstd * (g - mean(g) - xhat * mean(g * xhat)), g = G * w: "
                               f"{shape_of(grads['x'])}"),
        step("dw", grads["w"], f"sum over B, T of G * xhat: {shape_of(grads['w'])}"),
        step("db", grads["b"], f"sum over B, T of G: {shape_of(grads['b'])}"),
    ]


def _rms_norm_forward(inputs, static):
    return rms_norm_forward(inputs["x"], inputs["w"], eps=RMS_NORM_EPS)


def _rms_norm_backward(dout, ctx, static):
    dx, dw = rms_norm_backward(dout, ctx)
    return {"x": dx, "w": dw}


def _rms_norm_steps(inputs, y, ctx, static):
    x = inputs["x"]
    mean_square = 1.0 / (ctx.rstd * ctx.rstd) - RMS_NORM_EPS   # read off: rstd = 1/sqrt(ms + eps)
    rows = shape_of(ctx.rstd)
    return [
        step("x", x, shape_of(x)),
        step("w", inputs["w"], shape_of(inputs["w"])),
        step("mean_square", mean_square, f"mean of x^2 over C: {shape_of(x)} -> {rows}  "
                                         f"(read off ctx: 1/rstd^2 - eps)"),
        step("rstd", ctx.rstd, f"1/sqrt(mean_square + eps), eps={RMS_NORM_EPS}: {rows}  "
                               f"(ctx.rstd)"),
        step("xhat", ctx.xhat, f"{shape_of(x)} * {rows} -> {shape_of(x)}  (ctx.xhat)"),
        step("y", y, f"{shape_of(x)} * (C,) -> {shape_of(y)}"),
    ]


def _rms_norm_backward_steps(dout, grads, ctx, static):
    return [
        step("G", dout, shape_of(dout), text="common:G"),
        step("dx", grads["x"], f"rstd * (g - xhat * mean(g * xhat)), g = G * w: "
                               f"{shape_of(grads['x'])}"),
        step("dw", grads["w"], f"sum over B, T of G * xhat: {shape_of(grads['w'])}"),
    ]


def _all_inputs(inputs, static):
    return list(inputs)


SIZES = {"batch": 1, "seq": 3, "d_model": 4}

LAYER_NORM = Part(
    name="layer_norm", defaults=dict(SIZES),
    make_inputs=_layer_norm_inputs,
    forward=_layer_norm_forward, backward=_layer_norm_backward,
    forward_steps=_layer_norm_steps, backward_steps=_layer_norm_backward_steps,
    checked=_all_inputs)

RMS_NORM = Part(
    name="rms_norm", defaults=dict(SIZES),
    make_inputs=_rms_norm_inputs,
    forward=_rms_norm_forward, backward=_rms_norm_backward,
    forward_steps=_rms_norm_steps, backward_steps=_rms_norm_backward_steps,
    checked=_all_inputs)
