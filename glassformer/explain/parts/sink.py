"""`explain sink`: attention sinks (ops/sink.py, gpt-oss) on a few tokens.

Each head has one learned logit s_h joined to every row of its scores, softmaxed with them and
dropped. The steps show the sinks, the weights with and without them (rows summing to less than
1), where the missing weight went (each row's sink share) and what that does to the output: it
shrinks, since the sink has no value vector. Backward: dL/ds_h, summed over every row of head h.
"""
from __future__ import annotations

import numpy as np

from glassformer.explain.core import Pair, Part, Setup, normal, shape_of, step, with_common
from glassformer.ops.attention import attention_backward_steps, attention_forward

SIZES = {"batch": 1, "seq": 4, "d_k": 4, "heads": 2}
# Sink logits: head 0 gets a strong sink, the others weaker ones, so the shares differ visibly.
SINK_FIRST, SINK_STEP = 2.0, -1.5

TEXT = with_common({
    "en": {
        "title": "Attention sinks (ops/sink.py, gpt-oss)",
        "sinks": "Sink logits s_h (H,): one learned number per head, joined to every row of "
                 "that head's scores as an extra column.",
        "plain": "Weights without sinks (plain causal softmax): every row sums to 1, so a head "
                 "must put all its weight on some key, wanted or not.",
        "weights": "Weights with the sink column softmaxed in and then dropped: each row sums "
                   "to 1 - (its sink share).",
        "row_sums": "Row sums of the kept weights (B, H, T): below 1 by exactly the sink share.",
        "sink_share": "Where the missing weight went: each row's weight on the sink, "
                      "exp(s_h) / (sum_j exp(score_j) + exp(s_h)). The first query has one key "
                      "to read, so a strong sink takes a large share there (StreamingLLM's "
                      "first-token sink, made a parameter).",
        "out": "Output weights @ V: the sink has no value vector, so the sink share is output "
               "that is simply not there; a head can say 'nothing here'.",
        "out_plain": "The output without sinks, for comparison.",
        "dsinks": "dL/ds_h = sum over rows of -p_sink * sum_j p_j dweights_j: a sink grows when "
                  "attending to nothing would lower the loss.",
        "dq": "dL/dq, as plain attention's, through the kept columns.",
    },
    "zh": {
        "title": "注意力汇（attention sinks，ops/sink.py，gpt-oss）",
        "sinks": "汇的 logit s_h (H,)：每个头一个可学习的数，作为额外的一列接到该头每一行分数后面。",
        "plain": "没有汇时的权重（普通因果 softmax）：每行之和为 1，不管想不想，头都必须把全部权重"
                 "分给某些键。",
        "weights": "把汇这一列放进 softmax、算完再丢掉之后的权重：每一行的和等于 1 减去该行的汇份额。",
        "row_sums": "保留下来的权重按行求和 (B, H, T)：比 1 小，差值正好是汇的份额。",
        "sink_share": "少掉的权重去了哪里：每一行分给汇的权重 exp(s_h) / (sum_j exp(score_j) + "
                      "exp(s_h))。第一个查询只有一个键可读，所以强的汇在那里拿走很大一份"
                      "（StreamingLLM 里第一个 token 充当的汇，在这里成了一个参数）。",
        "out": "输出 weights @ V：汇没有值向量，所以汇的那一份输出就是不存在的；头可以表达"
               "“这里没什么可看的”。",
        "out_plain": "没有汇时的输出，用来对比。",
        "dsinks": "dL/ds_h = 对所有行求和 -p_sink * sum_j p_j dweights_j：当“什么都不看”能降低损失时，"
                  "汇就会变大。",
        "dq": "dL/dq，与普通注意力相同，只经过保留下来的列。",
    },
})


def _forward(inp):
    return attention_forward(inp["q"], inp["k"], inp["v"], causal=True, sinks=inp["sinks"])


def _backward(dout, ctx):
    grads = attention_backward_steps(dout, ctx)
    return {"q": grads.dq, "k": grads.dk, "v": grads.dv, "sinks": grads.dsinks}


def _inputs(options: dict, rng) -> Setup:
    b, t, d, h = (options[name] for name in ("batch", "seq", "d_k", "heads"))
    inputs = {name: normal(rng, (b, h, t, d)) for name in ("q", "k", "v")}   # (B, H, T, D)
    sinks = SINK_FIRST + SINK_STEP * np.arange(h)                              # (H,)
    inputs["sinks"] = sinks.astype(np.float32).reshape(h, 1, 1)                # (H, 1, 1)
    return Setup(inputs, Pair(_forward, _backward), {})


def _steps(inputs, out, ctx, static):
    plain, plain_ctx = attention_forward(inputs["q"], inputs["k"], inputs["v"], causal=True)
    weights = ctx.softmax.probs                                               # (B, H, T, S)
    share = ctx.softmax.sink_probs[..., 0]                                    # (B, H, T)
    return [step(TEXT, "sinks", inputs["sinks"].reshape(-1), "attn.sinks (H,)"),
            step(TEXT, "plain", plain_ctx.softmax.probs, "softmax(scores, causal)"),
            step(TEXT, "weights", weights, "softmax([scores | s_h])[..., :S]"),
            step(TEXT, "row_sums", weights.sum(-1), "weights.sum(-1)"),
            step(TEXT, "sink_share", share, "ctx.softmax.sink_probs"),
            step(TEXT, "out", out, f"weights @ v -> {shape_of(out)}"),
            step(TEXT, "out_plain", plain, "plain weights @ v")]


def _backward_steps(dout, grads, ctx, static):
    return [step(TEXT, "G", dout, shape_of(dout)),
            step(TEXT, "dsinks", grads["sinks"].reshape(-1), "(H, 1, 1) -> (H,)"),
            step(TEXT, "dq", grads["q"], shape_of(grads["q"]))]


SINK = Part(name="sink", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_steps,
            backward_steps=_backward_steps, text=TEXT)
