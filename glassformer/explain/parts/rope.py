"""`explain rope`: ops/rope.py, step by step, through its "theta-100" gradcheck case.

q (B, H, T, D) is turned by rope_forward with the tables of rope_tables (read back from its ctx),
then the relative-position property: one fixed query vector and one fixed key vector are placed
at every position and turned; their score matrix (attention_scores, scale 1) has the same value
along each diagonal, i.e. q_m . k_n depends only on m - n.

note: the case calls its input x, so the check reports dx; the steps call it q, as it is here.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.core import Part, Setup, normal, shape_of, step, with_common
from glassformer.gradcheck.cases import find_case
from glassformer.ops.attention import attention_scores
from glassformer.ops.rope import rope_forward

SIZES = {"batch": 1, "seq": 6, "d_model": 4, "heads": 1}
# The theta of the case below: small, so that even D = 4 turns visibly at short positions
# (LLaMA uses 10000). Shown in the cos step's algebra.
ROPE_THETA = 100.0
CASE = find_case("rope", "theta-100")
# The offset m - n of the two position pairs compared, and the other offset shown beside them.
SAME_OFFSET = 2
OTHER_OFFSET = 1

TEXT = with_common({
    "en": {
        "title": "Rotary position embedding, RoPE (ops/rope.py)",
        "positions": "Positions 0 .. T-1, one per token.",
        "cos": "cos table (T, D): channel pair i (i and i + D/2) turns by angle "
               "pos * theta^(-2i/D); early pairs turn fast, late pairs slowly. From ctx.",
        "sin": "sin table of the same angles. From ctx.",
        "q": "Queries q (B, H, T, D) before rotation.",
        "q_rot": "q after RoPE: each channel pair of token t turned by its angle at position t. "
                 "Lengths are unchanged; only directions move.",
        "q_fixed": "To test the key property, one query vector placed at every position.",
        "k_fixed": "And one key vector placed at every position.",
        "scores_fixed": "Scores of the turned copies against each other: every diagonal holds "
                        "one value, so a score depends only on how far apart the tokens are.",
        "score": "q at position {m} . k at position {n} (offset {offset}).",
        "dq": "dL/dq: G turned back by the same angles (rotation by -angle), since a rotation's "
              "transpose is its inverse.",
    },
    "zh": {
        "title": "旋转位置编码 RoPE（ops/rope.py）",
        "positions": "位置 0 .. T-1，每个 token 一个。",
        "cos": "cos 表 (T, D)：第 i 对通道（i 与 i + D/2）旋转的角度是 pos * theta^(-2i/D)；"
               "靠前的通道对转得快，靠后的转得慢。取自 ctx。",
        "sin": "同样角度的 sin 表。取自 ctx。",
        "q": "旋转之前的查询 q (B, H, T, D)。",
        "q_rot": "RoPE 之后的 q：第 t 个 token 的每对通道都按位置 t 的角度旋转。向量长度不变，"
                 "只改变方向。",
        "q_fixed": "为了验证关键性质：把同一个查询向量放到每一个位置上。",
        "k_fixed": "再把同一个键向量放到每一个位置上。",
        "scores_fixed": "旋转后的副本两两相乘得到的分数：每条对角线上的值都相同，所以分数只取决于"
                        "两个 token 相隔多远。",
        "score": "位置 {m} 的 q 与位置 {n} 的 k 的点积（相距 {offset}）。",
        "dq": "dL/dq：把 G 按相同角度转回去（旋转 -angle），因为旋转矩阵的转置就是它的逆。",
    },
})


def _inputs(options: dict, rng) -> Setup:
    b, t, c, h = options["batch"], options["seq"], options["d_model"], options["heads"]
    if c % h or (c // h) % 2:
        raise GlassformerError(f"explain rope needs an even head dim D = d_model / heads, got "
                               f"d_model={c}, heads={h}")
    if t < SAME_OFFSET + 2:
        raise GlassformerError(f"explain rope needs --seq >= {SAME_OFFSET + 2} to compare two "
                               f"position pairs {SAME_OFFSET} apart, got {t}")
    d = c // h
    inputs = {"x": normal(rng, (b, h, t, d)),                        # q: (B, H, T, D)
              "q_one": normal(rng, (d,)),                            # one query vector (D,)
              "k_one": normal(rng, (d,))}                            # one key vector (D,)
    return Setup(inputs, CASE, {})


def _relative_demo(inputs, ctx):
    """One query and one key vector placed at every position, turned, and scored against
    each other: (T, D) and (T, D) -> (T, T) scores."""
    t, d = ctx.cos.shape
    q_fixed = np.broadcast_to(inputs["q_one"], (t, d))                 # (D,) -> (T, D)
    k_fixed = np.broadcast_to(inputs["k_one"], (t, d))                 # (D,) -> (T, D)
    q_turned, _ = rope_forward(q_fixed, ctx.cos, ctx.sin)              # (T, D)
    k_turned, _ = rope_forward(k_fixed, ctx.cos, ctx.sin)              # (T, D)
    return q_fixed, k_fixed, attention_scores(q_turned, k_turned, 1.0)  # (T, T)


def _steps(inputs, out, ctx, static):
    q = inputs["x"]
    t, d = ctx.cos.shape
    q_fixed, k_fixed, scores = _relative_demo(inputs, ctx)
    last = t - 1
    pairs = [(SAME_OFFSET, 0), (last, last - SAME_OFFSET), (last, last - OTHER_OFFSET)]
    keys = ["score_a", "score_b", "score_c"]
    steps = [step(TEXT, "positions", np.arange(t), f"arange(T={t})"),
             step(TEXT, "cos", ctx.cos, f"cos(pos * theta^(-2i/D)), theta={ROPE_THETA:g}: "
                                        f"({t},{d})  (ctx.cos)"),
             step(TEXT, "sin", ctx.sin, f"sin(pos * theta^(-2i/D)): ({t},{d})  (ctx.sin)"),
             step(TEXT, "q", q, f"{shape_of(q)}  (B, H, T, D)"),
             step(TEXT, "q_rot", out, f"q * cos + rotate_half(q) * sin: {shape_of(q)} * "
                                      f"({t},{d}) -> {shape_of(out)}"),
             step(TEXT, "q_fixed", q_fixed, f"q_one ({d},) repeated -> ({t},{d})"),
             step(TEXT, "k_fixed", k_fixed, f"k_one ({d},) repeated -> ({t},{d})"),
             step(TEXT, "scores_fixed", scores, f"rope(q_fixed) @ rope(k_fixed)^T: ({t},{t})")]
    for key, (m, n) in zip(keys, pairs):
        steps.append(step(TEXT, key, scores[m, n], f"q_{m} . k_{n}, m - n = {m - n}",
                          text="score", m=m, n=n, offset=m - n))
    return steps


def _backward_steps(dout, grads, ctx, static):
    return [step(TEXT, "G", dout, shape_of(dout)),
            step(TEXT, "dq", grads["x"], f"G * cos - rotate_half(G * sin): "
                                         f"{shape_of(grads['x'])}")]


ROPE = Part(name="rope", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_steps,
            backward_steps=_backward_steps, text=TEXT)
