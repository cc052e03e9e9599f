"""`explain gelu`, `explain silu` and `explain swiglu`: ops/activation.py and ops/swiglu.py.

Each runs its op's gradcheck case (gelu "erf" or "tanh", silu "plain", swiglu "batched"). GELU
and SiLU are out = x * gate(x). GELU's ctx keeps its local slope gate + x gate'(x) and SiLU's
keeps the sigmoid gate; each is shown as it is. SwiGLU's ctx keeps silu(gate), the linear branch
`up`, and SiLU's own ctx (with the sigmoid).
"""
from __future__ import annotations

from glassformer.explain.core import Part, Setup, normal, shape_of, step, with_common
from glassformer.gradcheck.cases import find_case

SIZES = {"batch": 1, "seq": 3, "d_model": 4}
# Spread of the random inputs: wide enough to reach both the flat (x << 0) and the linear
# (x >> 0) parts of each curve.
INPUT_STD = 2.0
# --approximate -> the gradcheck case of that GELU form
GELU_CASES = {"none": find_case("gelu", "erf"), "tanh": find_case("gelu", "tanh")}
SILU_CASE = find_case("silu", "plain")
SWIGLU_CASE = find_case("swiglu", "batched")

SLOPE_ALGEBRA = {
    "none": "Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2",
    "tanh": "g (1 + x (1 - g) 2 du/dx), g = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)",
}
OUT_ALGEBRA = {"none": "x * Phi(x)", "tanh": "x * g"}

GELU_TEXT = with_common({
    "en": {
        "title": "GELU (ops/activation.py)",
        "x": "Input x, any shape; GELU acts on each number separately.",
        "slope_none": "Local slope d out / d x = Phi(x) + x phi(x), where Phi(x) is the "
                      "probability that a standard normal variable is below x and phi its "
                      "density. Computed in the forward and saved in ctx, so backward is one "
                      "product.",
        "slope_tanh": "Local slope of GPT-2's tanh form, g (1 + x (1 - g) 2 du/dx) with the gate "
                      "g = sigmoid(2u), a close fit to Phi(x) that avoids erf. Computed in the "
                      "forward and saved in ctx, so backward is one product.",
        "out_none": "out = x * Phi(x): a smooth ReLU that dips slightly below 0 around "
                    "x = -0.75.",
        "out_tanh": "out = x * gate (tanh form): within about 1e-3 of exact GELU.",
        "dx": "dL/dx = G * slope, the slope the forward saved: 0.5 at x = 0, a little above 1 "
              "near x = 1.5, fading to 0 for very negative x.",
    },
    "zh": {
        "title": "GELU 激活（ops/activation.py）",
        "x": "输入 x，形状任意；GELU 对每个数单独作用。",
        "slope_none": "局部斜率 d out / d x = Phi(x) + x phi(x)：Phi(x) 是标准正态变量小于 x 的"
                      "概率，phi 是它的密度。在前向里算好并保存在 ctx 中，反向只需一次乘法。",
        "slope_tanh": "GPT-2 tanh 形式的局部斜率 g (1 + x (1 - g) 2 du/dx)，其中门 g = sigmoid(2u) "
                      "与 Phi(x) 非常接近且不需要 erf。在前向里算好并保存在 ctx 中，反向只需一次乘法。",
        "out_none": "out = x * Phi(x)：一条平滑的 ReLU，在 x = -0.75 附近略低于 0。",
        "out_tanh": "out = x * gate（tanh 近似）：与精确 GELU 的差约在 1e-3 以内。",
        "dx": "dL/dx = G * slope，即前向保存的局部斜率：x = 0 处为 0.5，x 约为 1.5 时"
              "略大于 1，x 很负时趋于 0。",
    },
})

SILU_TEXT = with_common({
    "en": {
        "title": "SiLU / swish (ops/activation.py)",
        "x": "Input x, any shape; SiLU acts on each number separately.",
        "sigmoid": "sigmoid(x) = 1 / (1 + exp(-x)), kept in ctx so backward needs no second "
                   "exp.",
        "out": "out = x * sigmoid(x): close to 0 for very negative x, close to x for large x.",
        "dx": "dL/dx = G * s * (1 + x * (1 - s)) with s = sigmoid(x).",
    },
    "zh": {
        "title": "SiLU / swish 激活（ops/activation.py）",
        "x": "输入 x，形状任意；SiLU 对每个数单独作用。",
        "sigmoid": "sigmoid(x) = 1 / (1 + exp(-x))，保存在 ctx 中，反向时不必再算一次 exp。",
        "out": "out = x * sigmoid(x)：x 很负时接近 0，x 很大时接近 x。",
        "dx": "dL/dx = G * s * (1 + x * (1 - s))，其中 s = sigmoid(x)。",
    },
})

SWIGLU_TEXT = with_common({
    "en": {
        "title": "SwiGLU (ops/swiglu.py)",
        "gate": "gate branch (B, T, F): in LLaMA's MLP this is x @ w_gate.",
        "up": "up branch (B, T, F): x @ w_up, a second, purely linear view of the token.",
        "sigmoid": "sigmoid(gate), from SiLU's ctx.",
        "activated": "silu(gate) = gate * sigmoid(gate), kept in ctx: decides how much of each "
                     "up unit passes.",
        "out": "out = silu(gate) * up, elementwise; the MLP then projects it back with w_down.",
        "dup": "dL/dup = G * silu(gate): the gate acts as a fixed multiplier for the up branch.",
        "dgate": "dL/dgate: G * up sent back through SiLU's slope.",
    },
    "zh": {
        "title": "SwiGLU 门控激活（ops/swiglu.py）",
        "gate": "门分支 (B, T, F)：在 LLaMA 的 MLP 中就是 x @ w_gate。",
        "up": "上分支 (B, T, F)：x @ w_up，对 token 的另一个纯线性视角。",
        "sigmoid": "sigmoid(gate)，取自 SiLU 的 ctx。",
        "activated": "silu(gate) = gate * sigmoid(gate)，保存在 ctx 中：决定每个 up 单元"
                     "能通过多少。",
        "out": "out = silu(gate) * up，逐元素相乘；之后 MLP 再用 w_down 投影回去。",
        "dup": "dL/dup = G * silu(gate)：对上分支来说，门就是一个固定的乘数。",
        "dgate": "dL/dgate：把 G * up 沿 SiLU 的斜率传回去。",
    },
})


def _x(options: dict, rng):
    return normal(rng, (options["batch"], options["seq"], options["d_model"]), std=INPUT_STD)


# ---------------------------------------------------------------- gelu

def _gelu_inputs(options: dict, rng) -> Setup:
    mode = options["approximate"]
    return Setup({"x": _x(options, rng)}, GELU_CASES[mode], {"approximate": mode})


def _gelu_steps(inputs, out, ctx, static):
    mode = static["approximate"]
    return [step(GELU_TEXT, "x", inputs["x"], shape_of(inputs["x"])),
            step(GELU_TEXT, "slope", ctx.slope, f"{SLOPE_ALGEBRA[mode]}: {shape_of(ctx.slope)}  "
                                                f"(ctx.slope)", text=f"slope_{mode}"),
            step(GELU_TEXT, "out", out, f"{OUT_ALGEBRA[mode]}: {shape_of(out)}",
                 text=f"out_{mode}")]


def _gelu_backward_steps(dout, grads, ctx, static):
    return [step(GELU_TEXT, "G", dout, shape_of(dout)),
            step(GELU_TEXT, "dx", grads["x"], f"G * slope: {shape_of(grads['x'])}")]


GELU = Part(name="gelu", defaults={**SIZES, "approximate": "none"}, make_inputs=_gelu_inputs,
            forward_steps=_gelu_steps, backward_steps=_gelu_backward_steps, text=GELU_TEXT)


# ---------------------------------------------------------------- silu

def _silu_inputs(options: dict, rng) -> Setup:
    return Setup({"x": _x(options, rng)}, SILU_CASE, {})


def _silu_steps(inputs, out, ctx, static):
    return [step(SILU_TEXT, "x", inputs["x"], shape_of(inputs["x"])),
            step(SILU_TEXT, "sigmoid", ctx.sigmoid, f"1 / (1 + exp(-x)): "
                                                    f"{shape_of(ctx.sigmoid)}  (ctx.sigmoid)"),
            step(SILU_TEXT, "out", out, f"x * sigmoid: {shape_of(out)}")]


def _silu_backward_steps(dout, grads, ctx, static):
    return [step(SILU_TEXT, "G", dout, shape_of(dout)),
            step(SILU_TEXT, "dx", grads["x"], f"G * s (1 + x (1 - s)), s = sigmoid: "
                                              f"{shape_of(grads['x'])}")]


SILU = Part(name="silu", defaults=dict(SIZES), make_inputs=_silu_inputs,
            forward_steps=_silu_steps, backward_steps=_silu_backward_steps, text=SILU_TEXT)


# ---------------------------------------------------------------- swiglu

def _swiglu_inputs(options: dict, rng) -> Setup:
    shape = (options["batch"], options["seq"], options["d_model"])   # (B, T, F)
    inputs = {"gate": normal(rng, shape, std=INPUT_STD), "up": normal(rng, shape)}
    return Setup(inputs, SWIGLU_CASE, {})


def _swiglu_steps(inputs, out, ctx, static):
    shape, text = shape_of(out), SWIGLU_TEXT
    return [step(text, "gate", inputs["gate"], f"x @ w_gate: {shape}"),
            step(text, "up", inputs["up"], f"x @ w_up: {shape}"),
            step(text, "sigmoid", ctx.silu.sigmoid, f"sigmoid(gate): {shape}  "
                                                    f"(ctx.silu.sigmoid)"),
            step(text, "activated", ctx.activated, f"gate * sigmoid(gate): {shape}  "
                                                   f"(ctx.activated)"),
            step(text, "out", out, f"silu(gate) * up: {shape}")]


def _swiglu_backward_steps(dout, grads, ctx, static):
    shape, text = shape_of(dout), SWIGLU_TEXT
    return [step(text, "G", dout, shape),
            step(text, "dup", grads["up"], f"G * silu(gate): {shape}"),
            step(text, "dgate", grads["gate"], f"silu backward of (G * up): {shape}")]


SWIGLU = Part(name="swiglu", defaults=dict(SIZES), make_inputs=_swiglu_inputs,
              forward_steps=_swiglu_steps, backward_steps=_swiglu_backward_steps,
              text=SWIGLU_TEXT)
