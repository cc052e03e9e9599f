"""`explain delta-rule`: the gated delta rule of Gated DeltaNet (ops/delta_rule.py), token by token.

One head's (Dk, Dv) state S is shown before and after one token's update, with what S predicted
for that token's key, the error, and the prediction afterwards (moved a fraction beta of the way
to v: the delta rule is one step of online least squares). Every number is read off the recurrent
form's ctx (its saved states). Then the chunked form (ops/delta_rule_chunked.py, chunks of 2)
runs on the same inputs: its unit lower-triangular system for the first chunk, and the outputs
of both forms side by side, equal to float32 rounding.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.core import Pair, Part, Setup, normal, shape_of, step, with_common
from glassformer.ops.delta_rule import delta_rule_backward, delta_rule_forward
from glassformer.ops.delta_rule_chunked import delta_rule_chunked_forward

SIZES = {"seq": 4, "d_k": 3, "heads": 1}
TOKEN = 1          # the token whose update is shown (0-based)
CHUNK = 2          # the chunked form's chunk size here (transformers' is 64)
NAMES = ("q", "k", "v", "g", "beta", "state")

TEXT = with_common({
    "en": {
        "title": "Gated delta rule, Gated DeltaNet's linear attention (ops/delta_rule.py)",
        "k": "Keys k (B, H, T, Dk), unit length (the block l2-normalises them).",
        "v": "Values v (B, H, T, Dv): what each key should map to.",
        "q": "Queries q (B, H, T, Dk); read out scaled by 1/sqrt(Dk).",
        "decay": "exp(g): how much of the state survives each token (g <= 0, the gate). From ctx.",
        "beta": "beta in (0, 1): how much of each token's error is written.",
        "S_before": "The state S before token {t}: one (Dk, Dv) matrix per head, the memory of "
                    "every earlier token. Its size does not grow with the text. From ctx.",
        "decayed": "Decayed: exp(g_{t}) S. Old associations fade.",
        "predicted": "What the decayed state already says for k_{t}: S^T k.",
        "error": "The error v_{t} - S^T k_{t}: only this is written (the delta rule).",
        "S_after": "S after token {t}: S + k_{t} (beta_{t} error)^T, a rank-1 correction. "
                   "From ctx.",
        "predicted_after": "What S now says for k_{t}: the old prediction moved beta_{t} of the "
                           "way to v_{t} (exactly, since k_{t} has unit length).",
        "out": "Outputs o_t = S_t^T q_t / sqrt(Dk): each token reads the state after its own "
               "write.",
        "system": "Chunked form, first chunk: the unit lower-triangular I + A, with A[i, j] = "
                  "beta_i (k_i . k_j) exp(gamma_i - gamma_j): how token j's write changes token "
                  "i's error inside the chunk. Inverting it by forward substitution gives all "
                  "the chunk's writes at once.",
        "out_chunked": "Outputs of the chunked form ({chunk} tokens per chunk): the same numbers, "
                       "since it solves the same recurrence, only in matrix products.",
        "gap": "Largest |recurrent - chunked|: float32 rounding.",
        "dq": "dL/dq: the state after each token, applied to G (o = S^T q).",
        "dk": "dL/dk: through both the write k d^T and the prediction S^T k.",
        "dv": "dL/dv: beta times the gradient reaching each token's write.",
        "dg": "dL/dg: how a stronger decay of the old state would change L.",
        "dbeta": "dL/dbeta: the write's gradient against the error it wrote.",
        "dstate": "dL/dS_0: what the state handed in from before would change (decoding "
                  "continues from it).",
    },
    "zh": {
        "title": "门控 delta 规则，Gated DeltaNet 的线性注意力（ops/delta_rule.py）",
        "k": "键 k (B, H, T, Dk)，长度为 1（模块里先做了 l2 归一化）。",
        "v": "值 v (B, H, T, Dv)：每个键应当映射到的内容。",
        "q": "查询 q (B, H, T, Dk)；读出时乘以 1/sqrt(Dk)。",
        "decay": "exp(g)：每过一个 token 状态保留多少（g <= 0，即门控）。取自 ctx。",
        "beta": "beta 在 (0, 1) 之间：每个 token 的误差写入多少。",
        "S_before": "第 {t} 个 token 之前的状态 S：每个头一个 (Dk, Dv) 矩阵，记着之前所有 token。"
                    "它的大小不随文本变长。取自 ctx。",
        "decayed": "衰减之后：exp(g_{t}) S。旧的关联逐渐淡去。",
        "predicted": "衰减后的状态对 k_{t} 已经给出的预测：S^T k。",
        "error": "误差 v_{t} - S^T k_{t}：只写入这一部分（这就是 delta 规则）。",
        "S_after": "第 {t} 个 token 之后的 S：S + k_{t} (beta_{t} 误差)^T，一个秩 1 的修正。"
                   "取自 ctx。",
        "predicted_after": "现在 S 对 k_{t} 的预测：旧预测朝 v_{t} 走了 beta_{t} 的比例"
                           "（因为 k_{t} 长度为 1，所以恰好如此）。",
        "out": "输出 o_t = S_t^T q_t / sqrt(Dk)：每个 token 读的是写入自己之后的状态。",
        "system": "分块形式的第一块：单位下三角矩阵 I + A，其中 A[i, j] = beta_i (k_i . k_j) "
                  "exp(gamma_i - gamma_j)，表示块内第 j 个 token 的写入如何改变第 i 个 token 的"
                  "误差。用前代法求它的逆，就能一次得到整块的写入。",
        "out_chunked": "分块形式（每块 {chunk} 个 token）的输出：数值相同，因为它解的是同一个递推，"
                       "只是换成了矩阵乘法。",
        "gap": "|递推 - 分块| 的最大值：float32 舍入误差。",
        "dq": "dL/dq：把每个 token 之后的状态作用在 G 上（o = S^T q）。",
        "dk": "dL/dk：既经过写入 k d^T，也经过预测 S^T k。",
        "dv": "dL/dv：beta 乘以到达每个 token 写入处的梯度。",
        "dg": "dL/dg：旧状态衰减得更强时 L 会怎样变化。",
        "dbeta": "dL/dbeta：写入的梯度与它所写入的误差的内积。",
        "dstate": "dL/dS_0：从前面传进来的状态会怎样影响 L（解码就是从它接着算）。",
    },
})


def _forward(inputs):
    (out, _), ctx = delta_rule_forward(*(inputs[n] for n in NAMES[:5]), state=inputs["state"])
    return out, ctx


def _backward(dout, ctx):
    return dict(zip(NAMES, delta_rule_backward(dout, ctx)))


def _inputs(options: dict, rng) -> Setup:
    t, d, h = options["seq"], options["d_k"], options["heads"]
    if t < TOKEN + 1:
        raise GlassformerError(f"explain delta-rule needs --seq >= {TOKEN + 1}, got {t}")
    k = normal(rng, (1, h, t, d))
    inputs = {"q": normal(rng, (1, h, t, d)),
              "k": (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32),
              "v": normal(rng, (1, h, t, d)),
              "g": -rng.uniform(0.05, 0.7, (1, h, t)).astype(np.float32),
              "beta": rng.uniform(0.3, 0.9, (1, h, t)).astype(np.float32),
              "state": normal(rng, (1, h, d, d), 0.5)}
    return Setup(inputs, Pair(_forward, _backward), {})


def _steps(inputs, out, ctx, static):
    t = TOKEN
    before, after = ctx.states[:, :, t], ctx.states[:, :, t + 1]           # (B, H, Dk, Dv)
    k_t = ctx.k[:, :, t]                                                     # (B, H, Dk)
    decayed = before * ctx.decay[:, :, t, None, None]
    predicted = np.einsum("bhkv,bhk->bhv", decayed, k_t)
    error = ctx.v[:, :, t] - predicted
    (chunked, _), cctx = delta_rule_chunked_forward(*(inputs[n] for n in NAMES[:5]),
                                                    state=inputs["state"], chunk_size=CHUNK)
    system = np.eye(CHUNK, dtype=np.float32) + np.tril(
        np.linalg.inv(cctx.tinv[:, :, 0].astype(np.float64)), -1)          # I + A, chunk 0
    shape_s = shape_of(before)
    return [step(TEXT, "k", inputs["k"], f"{shape_of(inputs['k'])}  |k_t| = 1"),
            step(TEXT, "v", inputs["v"], shape_of(inputs["v"])),
            step(TEXT, "q", inputs["q"], shape_of(inputs["q"])),
            step(TEXT, "decay", ctx.decay, f"exp(g): {shape_of(ctx.decay)}  (ctx.decay)"),
            step(TEXT, "beta", ctx.beta, shape_of(ctx.beta)),
            step(TEXT, "S_before", before, f"ctx.states[:, :, {t}]: {shape_s}", t=t),
            step(TEXT, "decayed", decayed, f"exp(g_{t}) * S: {shape_s}", t=t),
            step(TEXT, "predicted", predicted, f"S^T k_{t}: {shape_of(predicted)}", t=t),
            step(TEXT, "error", error, f"v_{t} - S^T k_{t}: {shape_of(error)}", t=t),
            step(TEXT, "S_after", after, f"ctx.states[:, :, {t + 1}] = S + k_{t} (beta_{t} "
                                         f"error)^T: {shape_s}", t=t),
            step(TEXT, "predicted_after", np.einsum("bhkv,bhk->bhv", after, k_t),
                 f"S_after^T k_{t} = S^T k_{t} + beta_{t} error", t=t),
            step(TEXT, "out", out, f"S_t^T q_t / sqrt(Dk): {shape_of(out)}"),
            step(TEXT, "system", system, f"I + A, chunk 0: ({CHUNK},{CHUNK}) per head"),
            step(TEXT, "out_chunked", chunked, f"chunk_size={CHUNK}: {shape_of(chunked)}",
                 chunk=CHUNK),
            step(TEXT, "gap", float(np.abs(chunked - out).max()), "max |o - o_chunked|")]


def _backward_steps(dout, grads, ctx, static):
    return [step(TEXT, "G", dout, shape_of(dout))] + [
        step(TEXT, f"d{name}", grads[name], shape_of(grads[name])) for name in NAMES]


DELTA_RULE = Part(name="delta-rule", defaults=dict(SIZES), make_inputs=_inputs,
                  forward_steps=_steps, backward_steps=_backward_steps, text=TEXT)
