"""`explain mha`: the multi-head attention block (blocks/attention.py) with H query heads and K
key/value heads, step by step, through the block's gradcheck case (attention_block.case).

Everything shown comes from one `attention_block_forward` call and its ctx (read here, and by
`explain block` and `explain gpt2` through `head_arrays`):

    q, k, v      linear_forward of the input the ctx saved with wq, wk and wv, i.e. the
                 block's own projections, (B, T, C) -> (B, T, H*D) and (B, T, K*D)
    heads        the ctx's attention inputs, (B, K, G, T, D) viewed as (B, H, T, D)
    scores       the attention op's ctx read by parts/attention.attention_arrays
    weights      ctx.attn.softmax.probs, (B, K, G, T, S) viewed as (B, H, T, S)
    per head     split_heads of the merged output, which the output projection saved
                 (blocks/attention.py: merged_heads)
    y            the block's output

GQA grouping, as the block arranges it (query head h = kv * G + g):

    query heads   q0 q1 | q2 q3        H = 4
    kv heads        k0  |   k1         K = 2, G = H / K = 2

The params are inputs under the case's names ("attn.wq"), so the check line names them so too.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.attention import attention_inputs, init_attention, merged_heads
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.heads import split_heads
from glassformer.blocks.names import prefixed
from glassformer.errors import GlassformerError
from glassformer.explain.core import Part, Setup, lively, normal, shape_of, step, with_common
from glassformer.explain.parts.attention import attention_arrays
from glassformer.gradcheck.cases import attention_block
from glassformer.ops.linear import linear_forward

SIZES = {"batch": 1, "seq": 4, "d_model": 8, "heads": 4, "kv_heads": None}
PREFIX = "attn."
PARAM_ORDER = ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo")

_PARAMS_EN = {
    "wq": "Query weights wq (C, H*D): all H heads' query projections side by side.",
    "bq": "Query bias bq (H*D,).",
    "wk": "Key weights wk (C, K*D): only K key heads, K <= H.",
    "bk": "Key bias bk (K*D,).",
    "wv": "Value weights wv (C, K*D): as many value heads as key heads.",
    "bv": "Value bias bv (K*D,).",
    "wo": "Output weights wo (H*D, C): mixes the heads' results back into width C.",
    "bo": "Output bias bo (C,).",
}
_PARAMS_ZH = {
    "wq": "查询权重 wq (C, H*D)：H 个头的查询投影并排放在一起。",
    "bq": "查询偏置 bq (H*D,)。",
    "wk": "键权重 wk (C, K*D)：只有 K 个键头，K <= H。",
    "bk": "键偏置 bk (K*D,)。",
    "wv": "值权重 wv (C, K*D)：值头的个数与键头相同。",
    "bv": "值偏置 bv (K*D,)。",
    "wo": "输出权重 wo (H*D, C)：把各个头的结果混合回宽度 C。",
    "bo": "输出偏置 bo (C,)。",
}

TEXT = with_common({
    "en": {
        "title": "Multi-head attention block (blocks/attention.py)",
        "x": "Input x (B, T, C): one row per token.",
        **_PARAMS_EN,
        "q": "Queries for all heads at once, one matmul: x @ wq + bq.",
        "k": "Keys for the K key heads: x @ wk + bk.",
        "v": "Values for the K value heads: x @ wv + bv.",
        "q_heads": "Split into heads: the last axis H*D is cut into H pieces of D, and the head "
                   "axis moves in front of T, so each head is an independent (T, D) problem.",
        "k_heads": "Keys split the same way, into K heads.",
        "v_heads": "Values split into K heads.",
        "groups": "Grouped-query attention: the H query heads form K groups of G = {g}; every "
                  "query head of a group reads the same key/value head. Queries are viewed as "
                  "(B, K, G, T, D), keys as (B, K, 1, S, D), and NumPy broadcasts the shared head "
                  "with no copy. K = H is plain multi-head attention, K = 1 multi-query.",
        "scale": "Scale 1/sqrt(D), D = head width.",
        "scores": "Scores per head: q @ k^T * scale, (T, S) for each of the H heads.",
        "weights": "Weights per head: causal softmax of each row. Each head learns its own "
                   "pattern: the heatmaps (darker = more weight) usually differ.",
        "head_out": "Each head's output: its weights times its (shared) values, (T, D) per head.",
        "merged": "Merge: heads put side by side again, (B, H, T, D) -> (B, T, H*D).",
        "y": "Output y = merged @ wo + bo: width C again, ready for the residual add.",
        "dbk": "dL/d{param} is exactly 0. The key bias adds one fixed vector to every key, which "
               "adds the same number to a whole row of scores, and softmax ignores a constant "
               "added to a row.",
        "dx": "dL/dx: x fed three projections (q, k, v), so three gradients add up.",
    },
    "zh": {
        "title": "多头注意力模块（blocks/attention.py）",
        "x": "输入 x (B, T, C)：每个 token 一行。",
        **_PARAMS_ZH,
        "q": "一次矩阵乘法得到所有头的查询：x @ wq + bq。",
        "k": "K 个键头的键：x @ wk + bk。",
        "v": "K 个值头的值：x @ wv + bv。",
        "q_heads": "拆分成头：最后一维 H*D 切成 H 段，每段长 D，再把头这一维移到 T 前面，"
                   "于是每个头都是一个独立的 (T, D) 问题。",
        "k_heads": "键按同样方式拆成 K 个头。",
        "v_heads": "值拆成 K 个头。",
        "groups": "分组查询注意力（GQA）：H 个查询头分成 K 组，每组 G = {g} 个；同一组的查询头"
                  "读取同一个键/值头。查询被看成 (B, K, G, T, D)，键看成 (B, K, 1, S, D)，"
                  "NumPy 通过广播共享这个头，不做拷贝。K = H 就是普通多头注意力，K = 1 是多查询注意力。",
        "scale": "缩放因子 1/sqrt(D)，D 为每个头的宽度。",
        "scores": "每个头的分数：q @ k^T * scale，H 个头各得到一个 (T, S) 矩阵。",
        "weights": "每个头的权重：对每一行做因果 softmax。每个头学到自己的模式，"
                   "所以热力图（越深权重越大）通常各不相同。",
        "head_out": "每个头的输出：它的权重乘以它（共享）的值向量，每个头 (T, D)。",
        "merged": "合并：把各个头重新并排，(B, H, T, D) -> (B, T, H*D)。",
        "y": "输出 y = merged @ wo + bo：重新回到宽度 C，可以做残差相加了。",
        "dbk": "dL/d{param} 恰好为 0。键偏置给每个键加上同一个向量，相当于给一整行分数加上"
               "同一个数，而 softmax 对整行加常数不敏感。",
        "dx": "dL/dx：x 进入了 q、k、v 三个投影，所以三条路径的梯度相加。",
    },
})


def attention_config(options: dict) -> BlockConfig:
    """GPT-2-style block config for the sizes given. K defaults to H/2 (when H is even) so that
    the grouping shows; any K dividing H may be given."""
    heads, kv_heads = options["heads"], options["kv_heads"]
    if kv_heads is None:
        kv_heads = heads // 2 if heads % 2 == 0 else heads
    if options["d_model"] % heads:
        raise GlassformerError(f"--heads {heads} must divide --d-model {options['d_model']}")
    return BlockConfig(d_model=options["d_model"], n_head=heads, n_kv_head=kv_heads)


def gqa_sketch(n_head: int, n_kv: int) -> str:
    """Which query heads share which key/value head, one group per line."""
    group = n_head // n_kv
    lines = []
    for kv in range(n_kv):
        queries = " ".join(f"q{kv * group + g}" for g in range(group))
        lines.append(f"{queries}  ->  k{kv} v{kv}")
    return "\n".join(lines)


def head_arrays(ctx, n_head: int) -> dict:
    """q, k, v per head, the scores and the weights per head, read off an AttentionBlockCtx."""
    attn = ctx.attn
    b, n_kv, group, t, d = attn.q.shape
    scores, weights = attention_arrays(attn)                     # (B, K, G, T, S) each
    return {"q_heads": attn.q.reshape(b, n_head, t, d),          # (B, K, G, T, D) -> (B, H, T, D)
            "k_heads": attn.k[:, :, 0],                          # (B, K, 1, S, D) -> (B, K, S, D)
            "v_heads": attn.v[:, :, 0],                          # (B, K, 1, S, D) -> (B, K, S, D)
            "scores": scores.reshape(b, n_head, t, -1),          # -> (B, H, T, S)
            "weights": weights.reshape(b, n_head, t, -1)}        # -> (B, H, T, S)


def projections(ctx, params: dict) -> dict:
    """The block's q, k, v projections: linear_forward of the inputs its ctx saved (what the
    queries read, and what the keys and values read: blocks/attention.py attention_inputs) with
    each weight."""
    x, source = attention_inputs(ctx)
    out = {}
    for name, read in (("q", x), ("k", source), ("v", source)):
        out[name], _ = linear_forward(read, params[f"w{name}"], params.get(f"b{name}"))
    return out


def _inputs(options: dict, rng) -> Setup:
    cfg = attention_config(options)
    b, t, c = options["batch"], options["seq"], cfg.d_model
    # 1/sqrt(C)-sized projections keep the scores O(1): weights neither uniform nor one-hot
    std = 1.0 / float(np.sqrt(c))
    params = lively(init_attention(cfg, rng, std=std, out_std=std), rng, std=std)
    inputs = {"x": normal(rng, (b, t, c)), **prefixed(params, PREFIX)}
    case = attention_block.case("explain", cfg, causal=True, with_key_bias=True)
    return Setup(inputs, case, {"cfg": cfg, "params": params})


def _steps(inputs, y, ctx, static):
    cfg, params = static["cfg"], static["params"]
    h, k = cfg.n_head, cfg.kv_heads
    x = inputs["x"]
    proj = projections(ctx, params)
    heads = head_arrays(ctx, h)
    attn = ctx.attn
    merged = merged_heads(ctx)                                       # (B, T, H*D)
    per_head = split_heads(merged, h)                                # (B, T, H*D) -> (B, H, T, D)
    d = cfg.dim_per_head
    steps = [step(TEXT, "x", x, shape_of(x))]
    steps += [step(TEXT, name, params[name], shape_of(params[name]), show="line")
              for name in PARAM_ORDER if name in params]
    steps += [
        step(TEXT, "q", proj["q"], f"x @ wq + bq: {shape_of(x)} -> {shape_of(proj['q'])} (H*D = "
                                   f"{h}*{d})"),
        step(TEXT, "k", proj["k"], f"x @ wk + bk: {shape_of(x)} -> {shape_of(proj['k'])} (K*D = "
                                   f"{k}*{d})"),
        step(TEXT, "v", proj["v"], f"x @ wv + bv: {shape_of(x)} -> {shape_of(proj['v'])}"),
        step(TEXT, "q_heads", heads["q_heads"], f"split: {shape_of(proj['q'])} -> (B,T,H,D) -> "
                                                f"{shape_of(heads['q_heads'])}"),
        step(TEXT, "k_heads", heads["k_heads"], f"split: {shape_of(proj['k'])} -> "
                                                f"{shape_of(heads['k_heads'])}"),
        step(TEXT, "v_heads", heads["v_heads"], f"split: {shape_of(proj['v'])} -> "
                                                f"{shape_of(heads['v_heads'])}"),
        step(TEXT, "groups", np.arange(h).reshape(k, h // k),
             f"q {shape_of(heads['q_heads'])} viewed as {shape_of(attn.q)} = (B,K,G,T,D); "
             f"k as {shape_of(attn.k)}, broadcast over G\n{gqa_sketch(h, k)}", g=h // k),
        step(TEXT, "scale", attn.scale, f"1/sqrt(D={d})"),
        step(TEXT, "scores", heads["scores"], f"q @ k^T * scale per head: "
                                              f"{shape_of(heads['scores'])}"),
        step(TEXT, "weights", heads["weights"], f"causal softmax over S: "
                                                f"{shape_of(heads['weights'])}", show="heads"),
        step(TEXT, "head_out", per_head, f"weights @ v: {shape_of(heads['weights'])} @ "
                                         f"(B,H,S,D) -> {shape_of(per_head)}"),
        step(TEXT, "merged", merged, f"merge: {shape_of(per_head)} -> (B,T,H,D) -> "
                                     f"{shape_of(merged)}"),
        step(TEXT, "y", y, f"merged @ wo + bo: {shape_of(merged)} -> {shape_of(y)}"),
    ]
    return steps


def param_grad_step(name: str, grad: np.ndarray, *, key: str, param: str):
    """One parameter's gradient on one line; the key bias's (exactly 0) gets its own text."""
    text = "dbk" if name.endswith("bk") else "dparam"
    return step(TEXT, key, grad, shape_of(grad), text=text, show="line", param=param)


def attention_grad_steps(grads: dict, prefix: str) -> list:
    """One line per parameter gradient of an attention block (its names under `prefix`), in the
    order its backward reaches them."""
    return [param_grad_step(name, grads[prefix + name], key="d" + name, param=name)
            for name in ("wo", "bo", "wv", "bv", "wk", "bk", "wq", "bq") if prefix + name in grads]


def _backward_steps(dout, grads, ctx, static):
    steps = [step(TEXT, "G", dout, shape_of(dout))]
    steps += attention_grad_steps(grads, PREFIX)
    steps.append(step(TEXT, "dx", grads["x"], f"dq wq^T + dk wk^T + dv wv^T: "
                                              f"{shape_of(grads['x'])}"))
    return steps


MHA = Part(name="mha", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_steps,
           backward_steps=_backward_steps, text=TEXT)
