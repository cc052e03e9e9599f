"""`explain layer_norm` and `explain rms_norm`: ops/layer_norm.py and ops/rms_norm.py, step by step.

Each runs the gradcheck case of its op (layer_norm "bias", eps 1e-5; rms_norm "eps-1e-6"). Each
op keeps only xhat and rstd in its ctx (all its backward needs). The steps the op does not keep
are read back off those two, never recomputed from x:

    centered = xhat / rstd          (the op made xhat = centered * rstd)
    mean     = x - centered         (the same number in every column of a row; column 0 is shown)
    var      = 1 / rstd^2 - eps     (the op made rstd = 1 / sqrt(var + eps))

so the printed mean and var are the ones the op used, and a wrong op would show wrong ones.
"""
from __future__ import annotations

import numpy as np

from glassformer.explain.core import Part, Setup, normal, shape_of, step, with_common
from glassformer.gradcheck.cases import find_case

LAYER_NORM_EPS = 1e-5   # GPT-2's and torch's default: the eps of the case below
RMS_NORM_EPS = 1e-6     # LLaMA's
LAYER_NORM_CASE = find_case("layer_norm", "bias")
RMS_NORM_CASE = find_case("rms_norm", "eps-1e-6")
SIZES = {"batch": 1, "seq": 3, "d_model": 4}

TEXT = {
    "en": {
        "layer_norm": {
            "title": "LayerNorm (ops/layer_norm.py)",
            "x": "Input x: B*T rows (one per token) of C numbers. LayerNorm works on each row "
                 "alone.",
            "w": "Scale w (gamma), learned, one per channel: after normalizing, the model may "
                 "stretch each channel again.",
            "b": "Shift b (beta), learned, one per channel.",
            "mean": "Mean of each row. The op does not keep it (its backward only needs xhat and "
                    "rstd), so it is read back as x - xhat / rstd.",
            "centered": "Centered rows x - mean: every row now averages 0.",
            "var": "Variance of each row, biased: divided by C, not C - 1 (as torch and GPT-2 "
                   "do). Read back from rstd.",
            "rstd": "rstd = 1 / sqrt(var + eps), saved in ctx. eps sits inside the square root, "
                    "so a constant row gives a large but finite factor, never a division by "
                    "zero.",
            "xhat": "xhat = centered * rstd, saved in ctx: each row has mean 0 and variance ~1.",
            "y": "Output y = xhat * w + b, shape unchanged (B, T, C).",
            "dx": "dL/dx: G reaches xhat as g = G * w; then the row's mean of g and its "
                  "projection on xhat are taken away, because moving one input also moves the "
                  "row's mean and spread. Each row of dx sums to 0.",
            "dw": "dL/dw: G * xhat, summed over every token.",
            "db": "dL/db: G summed over every token.",
        },
        "rms_norm": {
            "title": "RMSNorm (ops/rms_norm.py)",
            "x": "Input x: B*T rows of C numbers, each normalized on its own.",
            "w": "Scale w, learned, one per channel. RMSNorm has no shift.",
            "mean_square": "Mean of x^2 over each row: no mean is subtracted first, which is the "
                           "whole difference from LayerNorm. Read back from rstd.",
            "rstd": "rstd = 1 / sqrt(mean_square + eps), saved in ctx (eps inside the root).",
            "xhat": "xhat = x * rstd, saved in ctx: each row now has root-mean-square ~1.",
            "y": "Output y = xhat * w, shape (B, T, C).",
            "dx": "dL/dx: like LayerNorm's, minus the mean(g) term, since no mean was "
                  "subtracted in the forward.",
            "dw": "dL/dw: G * xhat, summed over every token.",
        },
    },
    "zh": {
        "layer_norm": {
            "title": "层归一化 LayerNorm（ops/layer_norm.py）",
            "x": "输入 x：共 B*T 行（每个 token 一行），每行 C 个数。LayerNorm 对每一行单独处理。",
            "w": "缩放 w（gamma）：可学习参数，每个通道一个；归一化之后，模型还可以把各通道重新拉伸。",
            "b": "平移 b（beta）：可学习参数，每个通道一个。",
            "mean": "每一行的均值。算子没有保存它（反向只需要 xhat 和 rstd），这里由 "
                    "x - xhat / rstd 反推得到。",
            "centered": "中心化后的行 x - mean：现在每一行的平均值都是 0。",
            "var": "每一行的方差，有偏估计：除以 C 而不是 C - 1（与 torch、GPT-2 一致）。"
                   "由 rstd 反推。",
            "rstd": "rstd = 1 / sqrt(var + eps)，保存在 ctx 中。eps 放在根号里面，所以即使一行全是"
                    "常数，也只会得到一个很大但有限的系数，不会除以零。",
            "xhat": "xhat = centered * rstd，保存在 ctx 中：每一行均值为 0、方差约为 1。",
            "y": "输出 y = xhat * w + b，形状不变 (B, T, C)。",
            "dx": "dL/dx：G 先变成到达 xhat 的 g = G * w；再减去该行 g 的均值以及 g 在 xhat 上的"
                  "投影，因为改动一个输入也会改变整行的均值和离散程度。dx 的每一行之和为 0。",
            "dw": "dL/dw：G * xhat，对所有 token 求和。",
            "db": "dL/db：G 对所有 token 求和。",
        },
        "rms_norm": {
            "title": "均方根归一化 RMSNorm（ops/rms_norm.py）",
            "x": "输入 x：B*T 行，每行 C 个数，各行单独归一化。",
            "w": "缩放 w：可学习参数，每个通道一个。RMSNorm 没有平移项。",
            "mean_square": "每一行 x^2 的均值：事先不减均值，这正是它与 LayerNorm 的全部区别。"
                           "由 rstd 反推。",
            "rstd": "rstd = 1 / sqrt(mean_square + eps)，保存在 ctx 中（eps 在根号内）。",
            "xhat": "xhat = x * rstd，保存在 ctx 中：每一行的均方根约为 1。",
            "y": "输出 y = xhat * w，形状 (B, T, C)。",
            "dx": "dL/dx：与 LayerNorm 的公式相同，只是少了 mean(g) 这一项，因为前向时没有减均值。",
            "dw": "dL/dw：G * xhat，对所有 token 求和。",
        },
    },
}
LAYER_NORM_TEXT = with_common({lang: TEXT[lang]["layer_norm"] for lang in TEXT})
RMS_NORM_TEXT = with_common({lang: TEXT[lang]["rms_norm"] for lang in TEXT})


def _inputs(options: dict, rng, *, bias: bool) -> dict:
    b, t, c = options["batch"], options["seq"], options["d_model"]
    # An offset and a spread per row, so that centering and scaling both visibly do something.
    inputs = {"x": normal(rng, (b, t, c), std=2.0, mean=1.0),          # (B, T, C)
              "w": normal(rng, (c,), std=0.3, mean=1.0)}               # (C,)
    if bias:
        inputs["b"] = normal(rng, (c,), std=0.3)                       # (C,)
    return inputs


def _layer_norm_inputs(options: dict, rng) -> Setup:
    return Setup(_inputs(options, rng, bias=True), LAYER_NORM_CASE, {})


def _rms_norm_inputs(options: dict, rng) -> Setup:
    return Setup(_inputs(options, rng, bias=False), RMS_NORM_CASE, {})


def _normalized_steps(text: dict, x: np.ndarray, y: np.ndarray, ctx, *, eps: float, of: str,
                      shift: str) -> list:
    """rstd, xhat and y, the steps both norms share: each keeps rstd and xhat in its ctx.
    of: what eps is added to; shift: the bias term of y's algebra ("" without one)."""
    rows = shape_of(ctx.rstd)
    return [
        step(text, "rstd", ctx.rstd, f"1/sqrt({of} + eps), eps={eps}: {rows}  (ctx.rstd)"),
        step(text, "xhat", ctx.xhat, f"{shape_of(x)} * {rows} -> {shape_of(x)}  (ctx.xhat)"),
        step(text, "y", y, f"{shape_of(x)} * (C,){shift} -> {shape_of(y)}"),
    ]


def _norm_backward_steps(text: dict, dout: np.ndarray, grads: dict, dx_algebra: str) -> list:
    """G, dx, dw and (layer norm) db."""
    steps = [
        step(text, "G", dout, shape_of(dout)),
        step(text, "dx", grads["x"], f"{dx_algebra}, g = G * w: {shape_of(grads['x'])}"),
        step(text, "dw", grads["w"], f"sum over B, T of G * xhat: {shape_of(grads['w'])}"),
    ]
    if "b" in grads:
        steps.append(step(text, "db", grads["b"], f"sum over B, T of G: {shape_of(grads['b'])}"))
    return steps


def _layer_norm_steps(inputs, y, ctx, static):
    x, text = inputs["x"], LAYER_NORM_TEXT
    centered = ctx.xhat / ctx.rstd                      # read off: xhat = centered * rstd
    mean = (x - centered)[..., :1]                      # (B, T, C) -> (B, T, 1), read off
    var = 1.0 / (ctx.rstd * ctx.rstd) - LAYER_NORM_EPS  # read off: rstd = 1/sqrt(var + eps)
    rows = shape_of(ctx.rstd)
    return [
        step(text, "x", x, shape_of(x)),
        step(text, "w", inputs["w"], shape_of(inputs["w"])),
        step(text, "b", inputs["b"], shape_of(inputs["b"])),
        step(text, "mean", mean, f"{shape_of(x)} -> {rows}  (read off ctx: x - xhat / rstd)"),
        step(text, "centered", centered, f"{shape_of(x)} - {rows} -> {shape_of(x)}  "
                                         f"(read off ctx: xhat / rstd)"),
        step(text, "var", var, f"mean of centered^2 over C: {rows}  "
                               f"(read off ctx: 1/rstd^2 - eps)"),
    ] + _normalized_steps(text, x, y, ctx, eps=LAYER_NORM_EPS, of="var", shift=" + (C,)")


def _layer_norm_backward_steps(dout, grads, ctx, static):
    return _norm_backward_steps(LAYER_NORM_TEXT, dout, grads,
                                "rstd * (g - mean(g) - xhat * mean(g * xhat))")


def _rms_norm_steps(inputs, y, ctx, static):
    x, text = inputs["x"], RMS_NORM_TEXT
    mean_square = 1.0 / (ctx.rstd * ctx.rstd) - RMS_NORM_EPS   # read off: rstd = 1/sqrt(ms + eps)
    rows = shape_of(ctx.rstd)
    return [
        step(text, "x", x, shape_of(x)),
        step(text, "w", inputs["w"], shape_of(inputs["w"])),
        step(text, "mean_square", mean_square, f"mean of x^2 over C: {shape_of(x)} -> {rows}  "
                                               f"(read off ctx: 1/rstd^2 - eps)"),
    ] + _normalized_steps(text, x, y, ctx, eps=RMS_NORM_EPS, of="mean_square", shift="")


def _rms_norm_backward_steps(dout, grads, ctx, static):
    return _norm_backward_steps(RMS_NORM_TEXT, dout, grads, "rstd * (g - xhat * mean(g * xhat))")


LAYER_NORM = Part(name="layer_norm", defaults=dict(SIZES), make_inputs=_layer_norm_inputs,
                  forward_steps=_layer_norm_steps, backward_steps=_layer_norm_backward_steps,
                  text=LAYER_NORM_TEXT)
RMS_NORM = Part(name="rms_norm", defaults=dict(SIZES), make_inputs=_rms_norm_inputs,
                forward_steps=_rms_norm_steps, backward_steps=_rms_norm_backward_steps,
                text=RMS_NORM_TEXT)
