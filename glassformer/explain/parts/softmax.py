"""`explain softmax` and `explain cross_entropy`: ops/softmax.py and ops/cross_entropy.py.

Each runs its op's gradcheck case (softmax "rows", cross_entropy "plain-BTV"). Softmax keeps only
its probabilities. Cross-entropy keeps the probabilities, the targets and the count n_valid; its
log-probabilities are not kept (backward works from the probabilities), so the trace calls
`log_softmax_forward`, the op cross-entropy itself runs, to show them.
"""
from __future__ import annotations

import numpy as np

from glassformer.explain.core import Part, Setup, normal, shape_of, step, with_common
from glassformer.gradcheck.cases import find_case
from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.ops.softmax import softmax_forward

# Spread of the random logits: wide enough that the distributions are clearly not uniform.
LOGIT_STD = 2.0
# Added to every logit to show the max-subtraction at work: exp(1000) overflows float32 and
# float64, yet softmax gives the same probabilities.
BIG_SHIFT = 1000.0
SOFTMAX_SIZES = {"batch": 1, "seq": 3, "d_model": 4}     # rows (B, T) of S = C scores
CROSS_ENTROPY_SIZES = {"batch": 2, "seq": 2, "d_model": 5}   # (B, T) positions, V = C classes
SOFTMAX_CASE = find_case("softmax", "rows")
CROSS_ENTROPY_CASE = find_case("cross_entropy", "plain-BTV")

SOFTMAX_TEXT = with_common({
    "en": {
        "title": "Softmax (ops/softmax.py)",
        "x": "Scores x: softmax runs along the last axis, one distribution per row.",
        "probs": "probs: subtract each row's max, exponentiate, divide by the row's sum. All "
                 "entries positive, each row sums to 1. Kept in ctx, all the backward needs.",
        "x_shifted": "The same scores plus 1000. exp(1000) is inf even in float64.",
        "probs_shifted": "Softmax of the shifted scores: identical probabilities and no overflow, "
                         "because the row max is subtracted before exp.",
        "dx": "dL/dx = p * (G - sum(G * p)) per row, no Jacobian built. With G all ones it is "
              "exactly 0: the probabilities always sum to 1, so their sum cannot change.",
    },
    "zh": {
        "title": "Softmax（ops/softmax.py）",
        "x": "分数 x：softmax 沿最后一维计算，每一行得到一个概率分布。",
        "probs": "probs：每行先减去最大值，取指数，再除以行和。所有元素为正，每行和为 1。"
                 "保存在 ctx 中，反向只需要它。",
        "x_shifted": "同样的分数再加 1000。即使在 float64 下 exp(1000) 也是 inf。",
        "probs_shifted": "平移后分数的 softmax：概率完全相同，也没有溢出，因为取指数前先减去了"
                         "行最大值。",
        "dx": "dL/dx = p * (G - sum(G * p))，逐行计算，不构造雅可比矩阵。当 G 全为 1 时结果"
              "恰好为 0：概率之和永远是 1，所以它的和不会变。",
    },
})

CROSS_ENTROPY_TEXT = with_common({
    "en": {
        "title": "Cross-entropy loss (ops/cross_entropy.py)",
        "logits": "Logits (B, T, V): one unnormalized score per class at each position.",
        "targets": "Targets (B, T): the correct class at each position.",
        "log_probs": "log_softmax(logits), via log-sum-exp so nothing overflows. The loss's "
                     "ctx keeps probabilities, not these, so they come from log_softmax_forward.",
        "picked": "The log-probability of each position's target, read off log_probs.",
        "n_valid": "How many positions count in the mean (targets equal to ignore_index would "
                   "not). From ctx.",
        "loss": "loss = -mean(picked): a single number; log(V) would be a uniform guess.",
        "probs": "softmax(logits), kept in ctx for the backward.",
        "onehot": "The targets written as one-hot rows, to compare with dlogits.",
        "G_loss": "Upstream gradient dL/dloss: the loss is one number, so G is one number too.",
        "dlogits": "dL/dlogits = (probs - onehot) * G / n_valid: softmax and log cancel into "
                   "\"predicted minus wanted\". Each row sums to 0.",
    },
    "zh": {
        "title": "交叉熵损失（ops/cross_entropy.py）",
        "logits": "logits (B, T, V)：每个位置对每个类别给出一个未归一化的分数。",
        "targets": "目标 (B, T)：每个位置的正确类别。",
        "log_probs": "log_softmax(logits)，用 log-sum-exp 计算，不会溢出。损失的 ctx 保存的是"
                     "概率而不是它，所以这里调用 log_softmax_forward 得到。",
        "picked": "每个位置上目标类别的对数概率，直接从 log_probs 里取出。",
        "n_valid": "参与平均的位置个数（目标等于 ignore_index 的位置不算）。取自 ctx。",
        "loss": "loss = -mean(picked)：一个数；均匀乱猜时约为 log(V)。",
        "probs": "softmax(logits)，保存在 ctx 中供反向使用。",
        "onehot": "把目标写成 one-hot 行，方便与 dlogits 对照。",
        "G_loss": "上游梯度 dL/dloss：损失是一个数，所以 G 也是一个数。",
        "dlogits": "dL/dlogits = (probs - onehot) * G / n_valid：softmax 与 log 相互抵消，"
                   "只剩“预测减去目标”。每一行之和为 0。",
    },
})


# ---------------------------------------------------------------- softmax

def _softmax_inputs(options: dict, rng) -> Setup:
    shape = (options["batch"], options["seq"], options["d_model"])
    return Setup({"x": normal(rng, shape, std=LOGIT_STD)}, SOFTMAX_CASE, {})


def _softmax_steps(inputs, probs, ctx, static):
    x, text = inputs["x"], SOFTMAX_TEXT
    shifted = x + BIG_SHIFT
    shifted_probs, _ = softmax_forward(shifted)
    return [step(text, "x", x, shape_of(x)),
            step(text, "probs", ctx.probs, f"exp(x - rowmax) / rowsum: {shape_of(probs)}  "
                                           f"(ctx.probs)"),
            step(text, "x_shifted", shifted, f"x + {BIG_SHIFT:g}: {shape_of(shifted)}"),
            step(text, "probs_shifted", shifted_probs, f"softmax(x + {BIG_SHIFT:g}): "
                                                       f"{shape_of(shifted_probs)}")]


def _softmax_backward_steps(dout, grads, ctx, static):
    return [step(SOFTMAX_TEXT, "G", dout, shape_of(dout)),
            step(SOFTMAX_TEXT, "dx", grads["x"], f"p * (G - rowsum(G * p)): "
                                                 f"{shape_of(grads['x'])}")]


SOFTMAX = Part(name="softmax", defaults=dict(SOFTMAX_SIZES), make_inputs=_softmax_inputs,
               forward_steps=_softmax_steps, backward_steps=_softmax_backward_steps,
               text=SOFTMAX_TEXT)


# ---------------------------------------------------------------- cross_entropy

def _cross_entropy_inputs(options: dict, rng) -> Setup:
    b, t, v = options["batch"], options["seq"], options["d_model"]
    logits = normal(rng, (b, t, v), std=LOGIT_STD)                    # (B, T, V)
    targets = rng.integers(0, v, size=(b, t))                         # (B, T)
    return Setup({"logits": logits, "targets": targets}, CROSS_ENTROPY_CASE, {})


def _cross_entropy_steps(inputs, loss, ctx, static):
    logits, targets, text = inputs["logits"], inputs["targets"], CROSS_ENTROPY_TEXT
    n_classes = logits.shape[-1]
    logp, _ = log_softmax_forward(logits)                             # (B, T, V)
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]   # (B, T, V) -> (B, T)
    onehot = np.eye(n_classes, dtype=logits.dtype)[targets]           # (B, T) -> (B, T, V)
    return [step(text, "logits", logits, shape_of(logits)),
            step(text, "targets", targets, f"{shape_of(targets)} ids in [0, V={n_classes})"),
            step(text, "log_probs", logp, f"(x - rowmax) - log rowsum exp(x - rowmax): "
                                          f"{shape_of(logp)}"),
            step(text, "picked", picked, f"log_probs[..., target]: {shape_of(logp)} -> "
                                         f"{shape_of(picked)}"),
            step(text, "n_valid", ctx.n_valid, "count(targets != ignore_index)  (ctx.n_valid)"),
            step(text, "loss", loss, f"-sum(picked) / n_valid: {shape_of(picked)} -> ()"),
            step(text, "probs", ctx.probs, f"exp(x - rowmax) / rowsum: {shape_of(ctx.probs)}  "
                                           f"(ctx.probs)"),
            step(text, "onehot", onehot, f"eye(V)[targets]: {shape_of(onehot)}")]


def _cross_entropy_backward_steps(dout, grads, ctx, static):
    dlogits = grads["logits"]
    return [step(CROSS_ENTROPY_TEXT, "G", dout, "()", text="G_loss"),
            step(CROSS_ENTROPY_TEXT, "dlogits", dlogits, f"(probs - onehot) * G / n_valid: "
                                                         f"{shape_of(dlogits)}")]


CROSS_ENTROPY = Part(name="cross_entropy", defaults=dict(CROSS_ENTROPY_SIZES),
                     make_inputs=_cross_entropy_inputs, forward_steps=_cross_entropy_steps,
                     backward_steps=_cross_entropy_backward_steps, text=CROSS_ENTROPY_TEXT)
