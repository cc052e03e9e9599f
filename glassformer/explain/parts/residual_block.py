"""`explain block`: one pre-norm GPT-2 layer (blocks/residual.py), and the per-layer steps that
`explain gpt2` repeats for every layer. It runs the layer's gradcheck case (residual_block.case)
in GPT-2's arrangement (residual_block.GPT2_LAYER) at the sizes asked for.

    h   = x + Attn(Norm1(x))          resid1
    out = h + MLP(Norm2(h))           resid2

Read off one `block_forward` ctx (the one `block_backward` uses):

    norm1      attention_inputs: the attention block saved its (normalized) input
    weights    attention_weights (blocks/residual.py)
    merged     merged_heads: heads merged, before the output projection
    attn_out   sub_block_outputs (blocks/residual.py): linear_forward(out_proj.x, out_proj.w, bo),
               the block's own output projection
    norm2      mlp.body.up.x
    mlp_up     linear_forward(up.x, up.w, b_up): GELU's input (its ctx keeps the slope only)
    mlp_act    mlp.body.down.x
    mlp_out    sub_block_outputs: linear_forward(down.x, down.w, b_down)

note: neither residual sum is in the ctx (backward does not need them), so resid1 and resid2 are
the same single `+` the block does, applied to the arrays above; tests check that resid2 equals
block_forward's own output.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.attention import attention_inputs, merged_heads
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.names import sub_params
from glassformer.blocks.residual import (attention_block_ctx, attention_weights, init_block,
                                         sub_block_outputs)
from glassformer.errors import GlassformerError
from glassformer.explain.core import Part, Setup, lively, normal, shape_of, step, with_common
from glassformer.explain.parts.attention_block import param_grad_step
from glassformer.gradcheck.cases import residual_block
from glassformer.ops.linear import linear_forward

SIZES = {"batch": 1, "seq": 4, "d_model": 8, "heads": 2}
# Within one layer, the order block_backward reaches the parameters in.
LAYER_BACKWARD_ORDER = ("mlp.", "norm2.", "attn.", "norm1.")

TEXT = with_common({
    "en": {
        "title": "Pre-norm GPT-2 layer (blocks/residual.py)",
        "x": "Residual stream entering the layer (B, T, C).",
        "norm1": "norm1: LayerNorm before attention (pre-norm): each token's row rescaled to "
                 "mean 0, std 1, then w and b applied. The residual stream itself is untouched.",
        "weights": "Attention weights per head: row t is how token t spreads its attention over "
                   "tokens 0..t (causal, so the upper triangle is 0).",
        "merged": "Each head's weighted sum of values, heads placed side by side again.",
        "attn_out": "Attention output: the merged heads projected back to width C, ready to be "
                    "added to the residual stream.",
        "resid1": "First residual add: x + attn_out. The layer adds to the stream instead of "
                  "replacing it, so gradients also flow straight through.",
        "norm2": "norm2: LayerNorm before the MLP, on the stream after attention.",
        "mlp_up": "MLP up-projection: width C -> F = 4C, one hidden vector per token.",
        "mlp_act": "GELU (tanh form, as GPT-2) on every hidden unit: negatives are squashed "
                   "towards 0, positives pass almost unchanged.",
        "mlp_out": "MLP down-projection: width F -> C, what the MLP adds to the stream.",
        "resid2": "Second residual add: resid1 + mlp_out, the layer's output (the next "
                  "layer's input).",
        "out": "block_forward's own output: equal to resid2 above.",
        "dx": "dL/dx: the skip paths carry G straight through; the paths through attention and "
              "the MLP add their share.",
    },
    "zh": {
        "title": "前置归一化的 GPT-2 层（blocks/residual.py）",
        "x": "进入这一层的残差流 (B, T, C)。",
        "norm1": "norm1：注意力之前的 LayerNorm（前置归一化）：把每个 token 的一行缩放成均值 0、"
                 "标准差 1，再乘 w 加 b。残差流本身不被改动。",
        "weights": "每个头的注意力权重：第 t 行表示 token t 如何把注意力分配给 token 0..t"
                   "（因果掩码，所以上三角为 0）。",
        "merged": "每个头对值向量的加权和，再把各个头并排拼回去。",
        "attn_out": "注意力输出：把拼好的各头投影回宽度 C，准备加回残差流。",
        "resid1": "第一次残差相加：x + attn_out。这一层是往残差流里“加”东西而不是替换，"
                  "所以梯度也能直接穿过去。",
        "norm2": "norm2：MLP 之前的 LayerNorm，作用在经过注意力之后的残差流上。",
        "mlp_up": "MLP 升维投影：宽度 C -> F = 4C，每个 token 得到一个隐藏向量。",
        "mlp_act": "对每个隐藏单元做 GELU（tanh 近似，与 GPT-2 相同）：负数被压向 0，"
                   "正数几乎原样通过。",
        "mlp_out": "MLP 降维投影：宽度 F -> C，也就是 MLP 加进残差流的内容。",
        "resid2": "第二次残差相加：resid1 + mlp_out，即这一层的输出（下一层的输入）。",
        "out": "block_forward 自己的输出：与上面的 resid2 相同。",
        "dx": "dL/dx：跳跃连接把 G 直接传过去；经过注意力和 MLP 的路径再各加上自己的一份。",
    },
})


def gpt2_block_config(options: dict) -> BlockConfig:
    """GPT-2's layer: pre-norm LayerNorm, tanh GELU, biases everywhere, MLP width 4C."""
    if options["d_model"] % options["heads"]:
        raise GlassformerError(f"--heads {options['heads']} must divide --d-model "
                               f"{options['d_model']}")
    return BlockConfig(d_model=options["d_model"], n_head=options["heads"],
                       **residual_block.GPT2_LAYER)


def layer_steps(bctx, x: np.ndarray, params: dict, prefix: str, *, key_prefix: str = "",
                brief: bool = False) -> tuple[list, np.ndarray]:
    """The steps of one layer read off its BlockCtx, and the layer's output (resid2).

    params: holds f"{prefix}attn.bo", f"{prefix}mlp.b_up" and f"{prefix}mlp.b_down" when the
    layer has biases.
    brief: the shorter list `explain gpt2` prints per layer.
    """
    attn, mlp = attention_block_ctx(bctx), bctx.mlp.body
    weights = attention_weights(bctx)                                 # (B, H, T, S)
    norm1, _ = attention_inputs(attn)                                 # (B, T, C)
    merged = merged_heads(attn)                                       # (B, T, H*D)
    attn_out, mlp_out = sub_block_outputs(bctx, sub_params(params, prefix))  # (B, T, C) each
    resid1 = x + attn_out            # the residual add (block_forward's one `+`), (B, T, C)
    mlp_up, _ = linear_forward(mlp.up.x, mlp.up.w, params.get(prefix + "mlp.b_up"))
    resid2 = resid1 + mlp_out        # the second residual add, (B, T, C)
    c, f = x.shape[-1], mlp.down.x.shape[-1]
    rows = [
        ("norm1", norm1, f"LayerNorm(x) * w + b: {shape_of(norm1)}"),
        ("weights", weights, f"causal softmax per head: {shape_of(weights)} (B,H,T,S)"),
        ("merged", merged, f"weights @ v, heads merged: {shape_of(merged)}"),
        ("attn_out", attn_out, f"merged @ wo + bo: {shape_of(merged)} -> "
                               f"{shape_of(attn_out)}"),
        ("resid1", resid1, f"x + attn_out: {shape_of(resid1)}"),
        ("norm2", mlp.up.x, f"LayerNorm(resid1) * w + b: {shape_of(mlp.up.x)}"),
        ("mlp_up", mlp_up, f"norm2 @ w_up + b_up: (B,T,C={c}) -> (B,T,F={f})"),
        ("mlp_act", mlp.down.x, f"gelu_tanh(mlp_up): {shape_of(mlp.down.x)}"),
        ("mlp_out", mlp_out, f"mlp_act @ w_down + b_down: (B,T,F={f}) -> {shape_of(mlp_out)}"),
        ("resid2", resid2, f"resid1 + mlp_out: {shape_of(resid2)}"),
    ]
    skipped = ("merged", "mlp_up") if brief else ()
    steps = []
    for name, value, algebra in rows:
        if name in skipped:
            continue
        show = "heads" if name == "weights" and not brief else "line"
        steps.append(step(TEXT, key_prefix + name, value, algebra, text=name, show=show))
    return steps, resid2


def _backward_rank(name: str) -> tuple[int, int, int]:
    """(stage, -layer, part of the layer): head first, then layers last to first, embeddings."""
    if name.startswith("norm_f.") or name == "lm_head":
        return (0, 0, 0)
    layer, local = 0, name
    if name.startswith("blocks."):
        _, index, local = name.split(".", 2)
        layer = int(index)
    for position, prefix in enumerate(LAYER_BACKWARD_ORDER):
        if local.startswith(prefix):
            return (1, -layer, position)
    return (2, 0, 0)                                  # tok_emb, pos_emb: reached last


def param_grad_steps(grads: dict, names) -> list:
    """One line per parameter gradient, in the order the backward reaches them."""
    return [param_grad_step(name, grads[name], key="d" + name, param=name)
            for name in sorted(names, key=_backward_rank)]


def _inputs(options: dict, rng) -> Setup:
    cfg = gpt2_block_config(options)
    b, t, c = options["batch"], options["seq"], cfg.d_model
    std = 1.0 / float(np.sqrt(c))
    params = lively(init_block(cfg, rng, std=std, out_std=std), rng, std=std)
    case = residual_block.case("explain", cfg, causal=True, with_key_bias=True)
    return Setup({"x": normal(rng, (b, t, c)), **params}, case,
                 {"cfg": cfg, "names": list(params)})


def _steps(inputs, out, ctx, static):
    x = inputs["x"]
    steps = [step(TEXT, "x", x, shape_of(x), show="line")]
    steps += layer_steps(ctx, x, inputs, "")[0]
    steps.append(step(TEXT, "out", out, f"block_forward(x): {shape_of(out)}", show="line"))
    return steps


def _backward_steps(dout, grads, ctx, static):
    steps = [step(TEXT, "G", dout, shape_of(dout), show="line")]
    steps += param_grad_steps(grads, static["names"])
    steps.append(step(TEXT, "dx", grads["x"], f"G + d(attention path) + d(MLP path): "
                                              f"{shape_of(grads['x'])}", show="line"))
    return steps


BLOCK = Part(name="block", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_steps,
             backward_steps=_backward_steps, text=TEXT)
