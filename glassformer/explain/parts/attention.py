"""`glassformer attention` (also `explain attention`): the seed tutorial's self-attention, by hand.

The seed (§1.2): 3 tokens, d_model=4, one head of width 2; X is (B=1, T=3, C=4) and Wq, Wk, Wv
are (C=4, D=2). Every number comes from the library's own ops: `linear_forward` for the
projections, `attention_forward` for the rest, its ctx for the scores and weights, and
`attention_backward_steps` / `linear_backward` for the gradients. Nothing is recomputed by hand.

This file is also where the attention op's ctx is read (`attention_arrays`); `explain mha` reads
the same ctx inside its block through it. The front door prints in the seed's own layout: a
heading that names the mask, a check line without a verdict, the flat JSON of `seed_json` and
the side-by-side view of `render_compare`.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np

from glassformer.explain.core import Pair, Part, Result, Setup, shape_of, step
from glassformer.explain.render import format_array, heatmap, to_jsonable
from glassformer.ops.attention import (AttentionCtx, attention_backward_steps, attention_forward,
                                       attention_scores)
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.softmax import masked_logits

SIZES = ("seq", "d_model", "d_k", "batch")
# Sizes of random inputs when only some are given (the seed's own).
RANDOM_SIZES = {"seq": 3, "d_model": 4, "d_k": 2, "batch": 1}
# note: the seed's gradients are tiny (~1e-6, its scores are ~1e-3), so float64 rounding in L
# dominates a 1e-6 step; a 1e-4 step keeps truncation (~step^2) and rounding both small.
SEED_FD_STEP = 1e-4

TEXT = {
    "en": {
        "title": "Self-attention by hand",
        "forward": "Self-attention by hand, forward pass",
        "backward": "Backward pass for L = sum(output * G)",
        "causal": "causal (decoder, GPT-style)",
        "bidirectional": "bidirectional (encoder, BERT-style)",
        "compare": "Causal vs bidirectional attention weights",
        "X": "Input X: one row per token, C=d_model numbers each, shape (B, T, C).",
        "Wq": "Query projection Wq (C, D): learned; maps a token to what it is looking for.",
        "Wk": "Key projection Wk (C, D): learned; maps a token to what it can be matched on.",
        "Wv": "Value projection Wv (C, D): learned; maps a token to what it passes on.",
        "Q": "Queries Q = X @ Wq: each token's question. Only the last axis changes, C -> D.",
        "K": "Keys K = X @ Wk: each token's label that queries are compared with.",
        "V": "Values V = X @ Wv: the content a token hands over when attended to.",
        "scale": "Scale 1/sqrt(D): dot products of D-dim vectors grow like sqrt(D); scaling keeps "
                 "softmax out of its flat, saturated region.",
        "scores": "Scores Q @ K^T * scale: row i = query token i, column j = key token j; "
                  "bigger means a better match.",
        "mask_causal": "Causal mask (True = may attend): token i sees tokens j <= i only, "
                       "so a decoder never peeks at the future. (The seed prints the opposite "
                       "convention, True = hidden.)",
        "mask_bidirectional": "No causal mask: every entry True. An encoder such as BERT lets "
                              "each token read the whole sentence, left and right.",
        "masked_scores": "Masked scores: forbidden entries become -inf, so softmax gives them "
                         "weight exactly 0. (The seed uses -1e9; the weights are the same.)",
        "weights": "Weights = softmax of each row: subtract the row max (stability), exponentiate, "
                   "divide by the row sum. Each row is a distribution over visible keys.",
        "output": "Output = weights @ V: each token gets the weighted average of the values it "
                  "can see.",
        "G": "Upstream gradient G = dL/d(output). With L = sum(output * G), that is G itself.",
        "dweights": "dL/dweights = G @ V^T: how the loss changes if a weight moves.",
        "dV": "dL/dV = weights^T @ G: each value collects the gradient of every query that "
              "read it, in proportion to its weight.",
        "dscores": "dL/dscores through softmax, without building its Jacobian: "
                   "w * (dw - sum_j dw_j w_j) per row. Masked entries get exactly 0.",
        "dQ": "dL/dQ = dscores @ K * scale (the score was Q K^T * scale).",
        "dK": "dL/dK = dscores^T @ Q * scale.",
        "dWq": "dL/dWq = X^T @ dQ, summed over batch and tokens: (C, T) @ (T, D) -> (C, D).",
        "dWk": "dL/dWk = X^T @ dK.",
        "dWv": "dL/dWv = X^T @ dV.",
        "dX": "dL/dX = dQ Wq^T + dK Wk^T + dV Wv^T: X fed three projections, so three "
              "gradients add up.",
        "compare_rows": "Rows that changed (query tokens whose view got wider)",
        "compare_last": "The last token already saw every token, so its row is the same.",
        "compare_upper": "Above the diagonal, causal weights are exactly 0; bidirectional ones "
                         "are not.",
    },
    "zh": {
        "title": "手算自注意力",
        "forward": "手算自注意力：前向传播",
        "backward": "反向传播：损失 L = sum(output * G)",
        "causal": "因果（解码器，GPT 风格）",
        "bidirectional": "双向（编码器，BERT 风格）",
        "compare": "因果注意力与双向注意力的权重对比",
        "X": "输入 X：每个 token 占一行，每行 C=d_model 个数，形状 (B, T, C)。",
        "Wq": "查询投影 Wq (C, D)：可学习参数，把 token 映射成“我想找什么”。",
        "Wk": "键投影 Wk (C, D)：可学习参数，把 token 映射成“我能被怎样匹配”。",
        "Wv": "值投影 Wv (C, D)：可学习参数，把 token 映射成“被关注时我交出的内容”。",
        "Q": "查询 Q = X @ Wq：每个 token 提出的问题。只有最后一维变化，C -> D。",
        "K": "键 K = X @ Wk：每个 token 的“标签”，查询拿它来比对。",
        "V": "值 V = X @ Wv：token 被关注时传递出去的内容。",
        "scale": "缩放因子 1/sqrt(D)：D 维向量的点积大约随 sqrt(D) 增长；缩放后 softmax "
                 "不会落进梯度很小的饱和区。",
        "scores": "分数 Q @ K^T * scale：第 i 行是查询 token i，第 j 列是键 token j，"
                  "数值越大越匹配。",
        "mask_causal": "因果掩码（True 表示可以关注）：token i 只能看 j <= i 的 token，"
                       "解码器因此看不到未来。（种子教程用的是相反约定：True 表示遮住。）",
        "mask_bidirectional": "没有因果掩码：全部为 True。BERT 这样的编码器让每个 token "
                              "同时读到左右两边。",
        "masked_scores": "掩码后的分数：被禁止的位置变成 -inf，softmax 后权重恰好为 0。"
                         "（种子教程用 -1e9，得到的权重相同。）",
        "weights": "权重 = 每一行做 softmax：先减去行最大值（数值稳定），取指数，再除以行和。"
                   "每一行都是对可见键的概率分布。",
        "output": "输出 = weights @ V：每个 token 得到它可见的值向量的加权平均。",
        "G": "上游梯度 G = dL/d(output)。取 L = sum(output * G)，它就是 G 本身。",
        "dweights": "dL/dweights = G @ V^T：某个权重变动时损失如何变化。",
        "dV": "dL/dV = weights^T @ G：每个值向量按权重收集所有读过它的查询的梯度。",
        "dscores": "经过 softmax 得到 dL/dscores，不必构造雅可比矩阵："
                   "每行 w * (dw - sum_j dw_j w_j)。被掩码的位置梯度恰好为 0。",
        "dQ": "dL/dQ = dscores @ K * scale（因为分数是 Q K^T * scale）。",
        "dK": "dL/dK = dscores^T @ Q * scale。",
        "dWq": "dL/dWq = X^T @ dQ，对批次和 token 求和：(C, T) @ (T, D) -> (C, D)。",
        "dWk": "dL/dWk = X^T @ dK。",
        "dWv": "dL/dWv = X^T @ dV。",
        "dX": "dL/dX = dQ Wq^T + dK Wk^T + dV Wv^T：X 进入了三个投影，三条路径的梯度相加。",
        "compare_rows": "发生变化的行（视野变宽的查询 token）",
        "compare_last": "最后一个 token 本来就能看到所有 token，所以它这一行不变。",
        "compare_upper": "对角线以上，因果权重恰好为 0，双向权重则不是。",
    },
}


def attention_arrays(ctx: AttentionCtx) -> tuple[np.ndarray, np.ndarray]:
    """The scores (before the mask) and the weights, read off an attention op's ctx.

    (..., T, D) q and (..., S, D) k -> (..., T, S) scores; the weights are the softmax's probs.
    """
    scores = attention_scores(ctx.q, ctx.k, ctx.scale)          # (..., T, S)
    return scores, ctx.softmax.probs


def seed_inputs() -> dict[str, np.ndarray]:
    """Fresh float32 copies of the seed's X, Wq, Wk, Wv."""
    x = np.array([[[0.1, 0.2, 0.3, 0.4],     # token 0
                   [0.5, 0.4, 0.3, 0.2],     # token 1
                   [0.0, 0.1, 0.0, 0.1]]],   # token 2
                 dtype=np.float32)           # (B=1, T=3, C=4)
    wq = np.array([[0.2, -0.1], [0.0, 0.1], [0.1, 0.2], [-0.1, 0.0]], dtype=np.float32)
    wk = np.array([[0.1, 0.1], [0.0, -0.1], [0.2, 0.0], [0.0, 0.2]], dtype=np.float32)
    wv = np.array([[0.1, 0.0], [-0.1, 0.1], [0.2, -0.1], [0.0, 0.2]], dtype=np.float32)
    return {"X": x, "Wq": wq, "Wk": wk, "Wv": wv}


def random_inputs(rng: np.random.Generator, *, batch: int, seq: int, d_model: int,
                  d_k: int) -> dict[str, np.ndarray]:
    """Random float32 X (B, T, C) ~ N(0, 1) and W (C, D) ~ N(0, 1/C), so Q, K stay O(1)."""
    w_std = 1.0 / float(np.sqrt(d_model))
    x = rng.standard_normal((batch, seq, d_model)).astype(np.float32)
    weights = {name: (rng.standard_normal((d_model, d_k)) * w_std).astype(np.float32)
               for name in ("Wq", "Wk", "Wv")}
    return {"X": x, **weights}


class SeedCtx(NamedTuple):
    """What the backward needs: the three projections' ctxs and the attention op's ctx."""
    proj: dict[str, LinearCtx]   # "Q", "K", "V" -> ctx of X @ W
    attn: AttentionCtx


def _forward(inputs: dict, *, causal: bool):
    x = inputs["X"]
    proj, proj_ctx = {}, {}
    for name in ("Q", "K", "V"):
        # (B, T, C) @ (C, D) -> (B, T, D)
        proj[name], proj_ctx[name] = linear_forward(x, inputs["W" + name.lower()])
    out, ctx = attention_forward(proj["Q"], proj["K"], proj["V"], causal=causal)
    return out, SeedCtx(proj_ctx, ctx)


def _backward(dout: np.ndarray, ctx: SeedCtx) -> dict:
    """dL/d of every input (X, Wq, Wk, Wv) and of the intermediates the steps show."""
    grads = attention_backward_steps(dout, ctx.attn)
    dx_q, dwq, _ = linear_backward(grads.dq, ctx.proj["Q"])
    dx_k, dwk, _ = linear_backward(grads.dk, ctx.proj["K"])
    dx_v, dwv, _ = linear_backward(grads.dv, ctx.proj["V"])
    # Fan-out: X fed all three projections, so its gradient is the sum of the three paths.
    dx = dx_q + dx_k + dx_v
    return {"X": dx, "Wq": dwq, "Wk": dwk, "Wv": dwv, "weights": grads.dweights,
            "V": grads.dv, "scores": grads.dscores, "Q": grads.dq, "K": grads.dk}


def _inputs(options: dict, rng) -> Setup:
    """The seed's numbers, or random ones when any size is given."""
    sizes = {name: options[name] for name in SIZES}
    if all(value is None for value in sizes.values()):
        inputs = seed_inputs()
    else:
        chosen = {name: RANDOM_SIZES[name] if value is None else value
                  for name, value in sizes.items()}
        inputs = random_inputs(rng, **chosen)
    causal = not options["bidirectional"]
    pair = Pair(partial(_forward, causal=causal), _backward)
    return Setup(inputs, pair, {"causal": causal})


def _swap_last(shape: str) -> str:
    dims = shape.strip("()").split(",")
    dims[-2], dims[-1] = dims[-1], dims[-2]
    return "(" + ",".join(dims) + ")"


def _steps(inputs, out, ctx, static):
    x, attn = inputs["X"], ctx.attn
    steps = [step(TEXT, name, inputs[name], shape_of(inputs[name]))
             for name in ("X", "Wq", "Wk", "Wv")]
    for name, value in (("Q", attn.q), ("K", attn.k), ("V", attn.v)):
        weight = inputs["W" + name.lower()]
        steps.append(step(TEXT, name, value, f"{shape_of(x)} @ {shape_of(weight)} -> "
                                             f"{shape_of(value)}"))
    scores, weights = attention_arrays(attn)                     # (B, T, S) each
    t, s = scores.shape[-2:]
    allowed = np.ones((t, s), dtype=bool) if attn.allowed is None else attn.allowed
    q_shape, k_shape = shape_of(attn.q), shape_of(attn.k)
    mask_text = "mask_causal" if static["causal"] else "mask_bidirectional"
    return steps + [
        step(TEXT, "scale", attn.scale, f"1/sqrt(D={attn.q.shape[-1]})"),
        step(TEXT, "scores", scores, f"{q_shape} @ {_swap_last(k_shape)} -> {shape_of(scores)}"),
        step(TEXT, "mask", allowed, shape_of(allowed), text=mask_text),
        step(TEXT, "masked_scores", masked_logits(scores, attn.allowed), shape_of(scores)),
        step(TEXT, "weights", weights, f"softmax over S: {shape_of(weights)}", show="heatmap"),
        step(TEXT, "output", out, f"{shape_of(weights)} @ {shape_of(attn.v)} -> "
                                  f"{shape_of(out)}"),
    ]


def _backward_steps(dout, grads, ctx, static):
    attn = ctx.attn
    w, v, q, k = attn.softmax.probs, attn.v, attn.q, attn.k
    x = ctx.proj["Q"].x
    ds = grads["scores"]
    return [
        step(TEXT, "G", dout, shape_of(dout)),
        step(TEXT, "dweights", grads["weights"], f"{shape_of(dout)} @ {_swap_last(shape_of(v))}"
                                                 f" -> {shape_of(grads['weights'])}"),
        step(TEXT, "dV", grads["V"], f"{_swap_last(shape_of(w))} @ {shape_of(dout)} -> "
                                     f"{shape_of(grads['V'])}"),
        step(TEXT, "dscores", ds, f"w * (dw - rowsum(dw * w)): {shape_of(ds)}"),
        step(TEXT, "dQ", grads["Q"], f"{shape_of(ds)} @ {shape_of(k)} * scale -> "
                                     f"{shape_of(grads['Q'])}"),
        step(TEXT, "dK", grads["K"], f"{_swap_last(shape_of(ds))} @ {shape_of(q)} * scale -> "
                                     f"{shape_of(grads['K'])}"),
        step(TEXT, "dWq", grads["Wq"], f"X^T @ dQ summed over B, T -> {shape_of(grads['Wq'])}"),
        step(TEXT, "dWk", grads["Wk"], f"X^T @ dK summed over B, T -> {shape_of(grads['Wk'])}"),
        step(TEXT, "dWv", grads["Wv"], f"X^T @ dV summed over B, T -> {shape_of(grads['Wv'])}"),
        step(TEXT, "dX", grads["X"], f"dQ Wq^T + dK Wk^T + dV Wv^T -> {shape_of(x)}"),
    ]


def _headings(options: dict, lang: str) -> tuple[str, str]:
    """The seed's headings: the forward one names the mask."""
    mode = TEXT[lang]["bidirectional" if options["bidirectional"] else "causal"]
    return f"{TEXT[lang]['forward']}: {mode}", TEXT[lang]["backward"]


ATTENTION = Part(name="attention", defaults={**dict.fromkeys(SIZES), "bidirectional": False},
                 make_inputs=_inputs, forward_steps=_steps, backward_steps=_backward_steps,
                 text=TEXT, fd_step=SEED_FD_STEP, headings=_headings, verdict=False)


def seed_json(result: Result) -> dict:
    """Every array under its stable key as nested lists (masked -inf written as -1e9), then
    "max_rel_err" (with a backward pass) and "causal": the seed walkthrough's flat layout."""
    payload = {s.key: to_jsonable(s.value) for s in result.forward}
    if result.backward is not None:
        payload.update({s.key: to_jsonable(s.value) for s in result.backward})
        payload["max_rel_err"] = result.check.max_rel_err
    payload["causal"] = not result.options["bidirectional"]
    return payload


def render_compare(causal: Result, bidirectional: Result, lang: str) -> str:
    """Causal and bidirectional weights side by side, and what changed between them."""
    text = TEXT[lang]
    w_causal = next(s.value for s in causal.forward if s.key == "weights")[0]
    w_bidir = next(s.value for s in bidirectional.forward if s.key == "weights")[0]
    changed = [int(i) for i in np.flatnonzero(np.any(w_causal != w_bidir, axis=-1))]
    lines = [f"== {text['compare']} ==", "",
             f"{text['causal']}:", format_array(w_causal), heatmap(w_causal), "",
             f"{text['bidirectional']}:", format_array(w_bidir), heatmap(w_bidir), "",
             f"{text['compare_rows']}: {changed}",
             text["compare_upper"]]
    if len(w_causal) - 1 not in changed:
        lines.append(text["compare_last"])
    return "\n".join(lines) + "\n"
