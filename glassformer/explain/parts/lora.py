"""`explain lora`: ops/lora.py, step by step, through its "no-bias" gradcheck case.

A frozen (C, C) weight W with a rank-2 adapter A (C, 2), B (2, C) beside it. B is drawn non-zero
(a fresh adapter's B is zero, which would hide the adapter's path and make dA zero). The backward
shows what is not computed: W is frozen, so there is no dW, and the ctx kept no x for one.
"""
from __future__ import annotations

from glassformer.explain.core import Part, Setup, normal, shape_of, step, with_common
from glassformer.gradcheck.cases import find_case

SIZES = {"batch": 1, "seq": 3, "d_model": 4}
RANK = 2        # r: small enough to see that h = x A is a narrow (N, r) matrix
CASE = find_case("lora", "no-bias")

TEXT = with_common({
    "en": {
        "title": "LoRA: a frozen linear plus a low-rank update (ops/lora.py)",
        "x": "Input x (B, T, C_in).",
        "w": "W (C_in, C_out): the pretrained weight, frozen. Training never changes it.",
        "a": "A (C_in, r): the adapter's first factor, trained (starts uniform in ±1/sqrt(C_in)).",
        "b": "B (r, C_out): the adapter's second factor, trained (starts at zero; random here "
             "so its path shows).",
        "scale": "s = alpha / r (rsLoRA: alpha / sqrt(r)): how much the update counts.",
        "h": "h = dropout(x) A: every row squeezed down to r numbers (no dropout here).",
        "delta": "delta = s · h B: the update, back at width C_out. A B has rank r at most.",
        "base": "base = x W: what the frozen layer alone gives.",
        "out": "y = base + delta = x (W + s A B): the same as a merged weight W' = W + s A B.",
        "g": "g = s · G: the scale folded into the upstream gradient once.",
        "dB": "dL/dB = h^T g: like a linear layer's dW, with h as its input.",
        "dh": "dL/dh = g B^T: (N, r), narrow.",
        "dA": "dL/dA = x^T dh: like a linear layer's dW, with x as its input.",
        "dx": "dL/dx = G W^T + dh A^T: x fed both paths, so both gradients add up.",
        "dW": "dL/dW: not computed. W is frozen, so its linear kept W but not x (ctx.base.x "
              "is None) and ran one product, G W^T, instead of two.",
    },
    "zh": {
        "title": "LoRA：冻结的线性层加一个低秩增量（ops/lora.py）",
        "x": "输入 x (B, T, C_in)。",
        "w": "W (C_in, C_out)：预训练的权重，冻结，训练中不变。",
        "a": "A (C_in, r)：适配器的第一个因子，参与训练（初始化为 ±1/sqrt(C_in) 内的均匀分布）。",
        "b": "B (r, C_out)：适配器的第二个因子，参与训练（本来初始化为 0；这里取随机值，好让这条支路"
             "看得见）。",
        "scale": "s = alpha / r（rsLoRA 为 alpha / sqrt(r)）：增量的权重。",
        "h": "h = dropout(x) A：每一行被压缩成 r 个数（这里没有 dropout）。",
        "delta": "delta = s · h B：增量，回到 C_out 宽。A B 的秩至多为 r。",
        "base": "base = x W：只有冻结层时的输出。",
        "out": "y = base + delta = x (W + s A B)：与合并后的权重 W' = W + s A B 完全相同。",
        "g": "g = s · G：把缩放系数一次性乘进上游梯度。",
        "dB": "dL/dB = h^T g：就像线性层的 dW，输入是 h。",
        "dh": "dL/dh = g B^T：(N, r)，很窄。",
        "dA": "dL/dA = x^T dh：就像线性层的 dW，输入是 x。",
        "dx": "dL/dx = G W^T + dh A^T：x 同时流入两条路，两个梯度相加。",
        "dW": "dL/dW：不计算。W 被冻结，所以它的线性层只保存 W、不保存 x（ctx.base.x 为 None），"
              "反向只做一次乘法 G W^T，而不是两次。",
    },
})


def _inputs(options: dict, rng) -> Setup:
    b, t, c = options["batch"], options["seq"], options["d_model"]
    inputs = {"x": normal(rng, (b, t, c)), "w": normal(rng, (c, c), std=0.5),
              "a": normal(rng, (c, RANK), std=0.5), "b": normal(rng, (RANK, c), std=0.5)}
    return Setup(inputs, CASE, {})


def _steps(inputs, out, ctx, static):
    adapter = ctx.adapter
    rows = adapter.u.reshape(-1, adapter.a.shape[0])                        # (N, C_in)
    delta = (adapter.h @ adapter.b) * adapter.scale                         # (N, C_out)
    base = rows @ ctx.base.w                                                # (N, C_out)
    return [step(TEXT, "x", inputs["x"], shape_of(inputs["x"])),
            step(TEXT, "w", ctx.base.w, f"{shape_of(ctx.base.w)}, frozen"),
            step(TEXT, "a", adapter.a, shape_of(adapter.a)),
            step(TEXT, "b", adapter.b, shape_of(adapter.b)),
            step(TEXT, "scale", adapter.scale, "alpha / r"),
            step(TEXT, "h", adapter.h, f"x A: (N, C_in) @ {shape_of(adapter.a)} -> "
                                       f"{shape_of(adapter.h)}"),
            step(TEXT, "delta", delta, f"s * h B -> {shape_of(delta)}"),
            step(TEXT, "base", base, f"x W -> {shape_of(base)}"),
            step(TEXT, "out", out, f"base + delta -> {shape_of(out)}")]


def _backward_steps(dout, grads, ctx, static):
    adapter = ctx.adapter
    g = dout.reshape(-1, adapter.b.shape[1]) * adapter.scale                # (N, C_out)
    dh = g @ adapter.b.T                                                    # (N, r)
    return [step(TEXT, "G", dout, shape_of(dout)),
            step(TEXT, "g", g, f"s * G: {shape_of(g)}"),
            step(TEXT, "dB", grads["b"], f"h^T g: {shape_of(grads['b'])}"),
            step(TEXT, "dh", dh, f"g B^T: {shape_of(dh)}"),
            step(TEXT, "dA", grads["a"], f"x^T dh: {shape_of(grads['a'])}"),
            step(TEXT, "dx", grads["x"], f"G W^T + dh A^T: {shape_of(grads['x'])}"),
            step(TEXT, "dW", [str(ctx.base.x)], "ctx.base.x", show="tokens")]


LORA = Part(name="lora", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_steps,
            backward_steps=_backward_steps, text=TEXT)
