"""`explain mha`: the multi-head attention block (blocks/attention.py) with H query heads and K
key/value heads, step by step.

Everything shown comes from one `attention_block_forward` call and its ctx:

    q, k, v      linear_forward of the input the ctx saved with wq, wk and wv, i.e. the
                 block's own projections, (B, T, C) -> (B, T, H*D) and (B, T, K*D)
    heads        the ctx's attention inputs, (B, K, G, T, D) viewed as (B, H, T, D)
    scores       attention_scores on those, as attention_forward made them
    weights      ctx.attn.softmax.probs, (B, K, G, T, S) viewed as (B, H, T, S)
    per head     split_heads of the merged output, which out_proj.x saved
    y            the block's output

GQA grouping, as the block arranges it (query head h = kv * G + g):

    query heads   q0 q1 | q2 q3        H = 4
    kv heads        k0  |   k1         K = 2, G = H / K = 2
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          init_attention, split_heads)
from glassformer.blocks.config import BlockConfig
from glassformer.errors import GlassformerError
from glassformer.explain.parts_core import Part, lively, normal, shape_of, step
from glassformer.ops.attention import attention_scores
from glassformer.ops.linear import linear_forward

MHA_SIZES = {"batch": 1, "seq": 4, "d_model": 8, "heads": 4, "kv_heads": None}
# Weight spread: 1/sqrt(C)-sized projections keep scores O(1), so the weights are neither uniform
# nor one-hot.
WEIGHT_GAIN = 1.0
PARAM_ORDER = ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo")


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


def _mha_inputs(options: dict, rng):
    cfg = attention_config(options)
    b, t, c = options["batch"], options["seq"], cfg.d_model
    std = WEIGHT_GAIN / float(np.sqrt(c))
    params = lively(init_attention(cfg, rng, std=std, out_std=std), rng, std=std)
    return {"x": normal(rng, (b, t, c)), **params}, {"cfg": cfg}


def _mha_forward(inputs, static):
    params = {name: inputs[name] for name in PARAM_ORDER if name in inputs}
    return attention_block_forward(params, inputs["x"], static["cfg"], causal=True)


def _mha_backward(dout, ctx, static):
    grads, dx, _ = attention_block_backward(dout, ctx)
    return {"x": dx, **grads}


def head_arrays(ctx, n_head: int) -> dict:
    """q, k, v per head and the weights per head, read off an AttentionBlockCtx."""
    attn = ctx.attn
    b, n_kv, group, t, d = attn.q.shape
    return {"q_heads": attn.q.reshape(b, n_head, t, d),           # (B, K, G, T, D) -> (B, H, T, D)
            "k_heads": attn.k[:, :, 0],                           # (B, K, 1, S, D) -> (B, K, S, D)
            "v_heads": attn.v[:, :, 0],                           # (B, K, 1, S, D) -> (B, K, S, D)
            "weights": attn.softmax.probs.reshape(b, n_head, t, -1)}  # -> (B, H, T, S)


def projections(ctx, inputs: dict) -> dict:
    """The block's q, k, v projections: linear_forward of the input its ctx saved (one input for
    the joined q|k|v product, or one per projection) with each weight."""
    sources = {name: lin.x for name, lin in (("q", ctx.q_proj), ("k", ctx.k_proj),
                                                ("v", ctx.v_proj)) if lin is not None}
    out = {}
    for name in "qkv":
        x = sources[name] if name in sources else ctx.qkv_proj.x
        out[name], _ = linear_forward(x, inputs[f"w{name}"], inputs.get(f"b{name}"))
    return out


def _mha_steps(inputs, y, ctx, static):
    cfg = static["cfg"]
    h, k = cfg.n_head, cfg.kv_heads
    x = inputs["x"]
    proj = projections(ctx, inputs)
    heads = head_arrays(ctx, h)
    attn = ctx.attn
    scores = attention_scores(attn.q, attn.k, attn.scale)           # (B, K, G, T, S)
    scores = scores.reshape(heads["weights"].shape)                  # -> (B, H, T, S)
    merged = ctx.out_proj.x                                          # (B, T, H*D)
    per_head = split_heads(merged, h)                                # (B, T, H*D) -> (B, H, T, D)
    d = cfg.dim_per_head
    steps = [step("x", x, shape_of(x))]
    steps += [step(name, inputs[name], shape_of(inputs[name]), show="line")
              for name in PARAM_ORDER if name in inputs]
    steps += [
        step("q", proj["q"], f"x @ wq + bq: {shape_of(x)} -> {shape_of(proj['q'])} (H*D = "
                             f"{h}*{d})"),
        step("k", proj["k"], f"x @ wk + bk: {shape_of(x)} -> {shape_of(proj['k'])} (K*D = "
                             f"{k}*{d})"),
        step("v", proj["v"], f"x @ wv + bv: {shape_of(x)} -> {shape_of(proj['v'])}"),
        step("q_heads", heads["q_heads"], f"split: {shape_of(proj['q'])} -> (B,T,H,D) -> "
                                          f"{shape_of(heads['q_heads'])}"),
        step("k_heads", heads["k_heads"], f"split: {shape_of(proj['k'])} -> "
                                          f"{shape_of(heads['k_heads'])}"),
        step("v_heads", heads["v_heads"], f"split: {shape_of(proj['v'])} -> "
                                          f"{shape_of(heads['v_heads'])}"),
        step("groups", np.arange(h).reshape(k, h // k),
             f"q {shape_of(heads['q_heads'])} viewed as {shape_of(attn.q)} = (B,K,G,T,D); "
             f"k as {shape_of(attn.k)}, broadcast over G\n{gqa_sketch(h, k)}",
             k=k, g=h // k),
        step("scale", attn.scale, f"1/sqrt(D={d})"),
        step("scores", scores, f"q @ k^T * scale per head: {shape_of(scores)}"),
        step("weights", heads["weights"], f"causal softmax over S: {shape_of(heads['weights'])}",
             show="heads"),
        step("head_out", per_head, f"weights @ v: {shape_of(heads['weights'])} @ "
                                   f"(B,H,S,D) -> {shape_of(per_head)}"),
        step("merged", merged, f"merge: {shape_of(per_head)} -> (B,T,H,D) -> {shape_of(merged)}"),
        step("y", y, f"merged @ wo + bo: {shape_of(merged)} -> {shape_of(y)}"),
    ]
    return steps


def _mha_backward_steps(dout, grads, ctx, static):
    steps = [step("G", dout, shape_of(dout), text="common:G")]
    for name in ("wo", "bo", "wv", "bv", "wk", "bk", "wq", "bq"):
        if name in grads:
            text = "common:dbk" if name == "bk" else "common:dparam"
            steps.append(step("d" + name, grads[name], shape_of(grads[name]), text=text,
                              show="line", param=name))
    steps.append(step("dx", grads["x"], f"dq wq^T + dk wk^T + dv wv^T: {shape_of(grads['x'])}"))
    return steps


def all_inputs(inputs, static):
    """Every input, the key bias too: its gradient is exactly 0 (see the dbk text), which the
    check compares in absolute terms."""
    return list(inputs)


MHA = Part(name="mha", defaults=dict(MHA_SIZES), make_inputs=_mha_inputs, forward=_mha_forward,
           backward=_mha_backward, forward_steps=_mha_steps, backward_steps=_mha_backward_steps,
           checked=all_inputs)
