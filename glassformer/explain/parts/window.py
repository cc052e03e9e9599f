"""`explain window`: sliding-window causal attention (ops/attention.py, `window=W`) on a few tokens.

What the mask hides: the plain causal mask, the window's, and their difference (the keys a
query could see in full attention but not through its window); then the scores, the weights
(zero wherever the mask hides a key) and the output. The ring a KV cache keeps for such a layer
(blocks/kv_cache.py) is shown as the slot each position lands in: W slots suffice, because no
query ever reads a key more than W - 1 positions back. Backward: dscores, dq, dk, dv, with the
hidden keys' columns exactly 0.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.core import Pair, Part, Setup, normal, shape_of, step, with_common
from glassformer.ops.attention import (attention_backward_steps, attention_forward,
                                       attention_scores, causal_mask)

SIZES = {"batch": 1, "seq": 6, "d_k": 4, "heads": 1, "window": 3}

TEXT = with_common({
    "en": {
        "title": "Sliding-window attention (ops/attention.py, window=W)",
        "causal": "Causal mask (T, S): query i may read key j when j <= i (1 = allowed).",
        "window_mask": "Window mask: also i - j < W, so each query reads only its W newest keys "
                       "(itself included). Mistral, Gemma 3's local layers and gpt-oss's "
                       "windowed layers use this rule (transformers' sliding_window_overlay).",
        "hidden": "What the window hides: keys causal attention would read but the window does "
                  "not (1 = hidden). Query {last} cannot see keys 0..{gone}: information from "
                  "there reaches it only through earlier layers, W - 1 positions per layer.",
        "scores": "Scores Q K^T / sqrt(D), (B, H, T, S), before the mask.",
        "weights": "Weights: softmax over the allowed keys only; hidden keys get exactly 0, "
                   "and every row still sums to 1.",
        "out": "Output weights @ V: each row mixes at most W value vectors.",
        "ring": "Ring slot of each position p in a KV cache of W slots (p mod W): position p "
                "overwrites p - W, which no later query reads. Memory stays W positions per "
                "layer however long the text.",
        "dscores": "dL/dscores: zero in every hidden column, so no gradient flows to keys "
                   "outside a query's window.",
        "dq": "dL/dq = dscores K / sqrt(D).",
        "dk": "dL/dk = dscores^T Q / sqrt(D): key j collects from the W queries that see it.",
        "dv": "dL/dv = weights^T G.",
    },
    "zh": {
        "title": "滑动窗口注意力（ops/attention.py，window=W）",
        "causal": "因果掩码 (T, S)：当 j <= i 时，查询 i 可以读取键 j（1 = 允许）。",
        "window_mask": "窗口掩码：还要求 i - j < W，于是每个查询只读它最近的 W 个键（包括它自己）。"
                       "Mistral、Gemma 3 的局部层和 gpt-oss 的窗口层都用这条规则"
                       "（transformers 的 sliding_window_overlay）。",
        "hidden": "窗口遮住了什么：因果注意力会读、窗口却不读的键（1 = 被遮住）。查询 {last} "
                  "看不到键 0..{gone}：那里的信息只能经由更早的层传过来，每一层最多前进 W - 1 个位置。",
        "scores": "掩码之前的分数 Q K^T / sqrt(D)，形状 (B, H, T, S)。",
        "weights": "权重：只在允许的键上做 softmax；被遮住的键权重恰好为 0，每一行的和仍然是 1。",
        "out": "输出 weights @ V：每一行最多混合 W 个值向量。",
        "ring": "在只有 W 个槽位的 KV 缓存里，每个位置 p 所在的环形槽位（p mod W）：位置 p 覆盖 "
                "p - W，而后面的查询再也不会读它。无论文本多长，每层只占 W 个位置的内存。",
        "dscores": "dL/dscores：每个被遮住的列都是 0，所以窗口外的键拿不到任何梯度。",
        "dq": "dL/dq = dscores K / sqrt(D)。",
        "dk": "dL/dk = dscores^T Q / sqrt(D)：键 j 从能看到它的 W 个查询那里收集梯度。",
        "dv": "dL/dv = weights^T G。",
    },
})


def _pair(window: int) -> Pair:
    def forward(inp):
        return attention_forward(inp["q"], inp["k"], inp["v"], causal=True, window=window)

    def backward(dout, ctx):
        grads = attention_backward_steps(dout, ctx)
        return {"q": grads.dq, "k": grads.dk, "v": grads.dv}

    return Pair(forward, backward)


def _inputs(options: dict, rng) -> Setup:
    b, t, d, h, w = (options[name] for name in ("batch", "seq", "d_k", "heads", "window"))
    if not 1 <= w < t:
        raise GlassformerError(f"explain window needs 1 <= --window < --seq, so that the "
                               f"window hides something; got --window {w}, --seq {t}")
    inputs = {name: normal(rng, (b, h, t, d)) for name in ("q", "k", "v")}   # (B, H, T, D)
    return Setup(inputs, _pair(w), {"window": w})


def _steps(inputs, out, ctx, static):
    t, w = inputs["q"].shape[-2], static["window"]
    causal = causal_mask(t, t)
    allowed = causal_mask(t, t, w)
    hidden = causal & ~allowed
    scores = attention_scores(inputs["q"], inputs["k"], ctx.scale)
    return [step(TEXT, "causal", causal.astype(np.int8), f"j <= i: ({t},{t})"),
            step(TEXT, "window_mask", allowed.astype(np.int8), f"j <= i and i - j < W={w}"),
            step(TEXT, "hidden", hidden.astype(np.int8), "causal and not window",
                 last=t - 1, gone=t - 1 - w),
            step(TEXT, "scores", scores, f"{shape_of(inputs['q'])} @ k^T -> {shape_of(scores)}"),
            step(TEXT, "weights", ctx.softmax.probs, f"softmax(scores, mask=window): "
                                                     f"{shape_of(ctx.softmax.probs)}"),
            step(TEXT, "out", out, f"weights @ v -> {shape_of(out)}"),
            step(TEXT, "ring", np.arange(t) % w, f"arange(T={t}) % W={w}")]


def _backward_steps(dout, grads, ctx, static):
    steps = attention_backward_steps(dout, ctx)
    return [step(TEXT, "G", dout, shape_of(dout)),
            step(TEXT, "dscores", steps.dscores, shape_of(steps.dscores)),
            step(TEXT, "dq", grads["q"], shape_of(grads["q"])),
            step(TEXT, "dk", grads["k"], shape_of(grads["k"])),
            step(TEXT, "dv", grads["v"], shape_of(grads["v"]))]


WINDOW = Part(name="window", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_steps,
              backward_steps=_backward_steps, text=TEXT)
