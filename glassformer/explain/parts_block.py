"""`explain block`: one pre-norm GPT-2 layer (blocks/residual.py), and the per-layer steps that
`explain gpt2` repeats for every layer.

    h   = x + Attn(Norm1(x))          resid1
    out = h + MLP(Norm2(h))           resid2

Read off one `block_forward` ctx (the one `block_backward` uses):

    norm1      attn.body.qkv_proj.x      the attention block saved its (normalized) input
    weights    attn.body.attn.softmax.probs
    merged     attn.body.out_proj.x      heads merged, before the output projection
    attn_out   linear_forward(out_proj.x, out_proj.w, bo): the block's own output projection
    norm2      mlp.body.up.x
    mlp_up     linear_forward(up.x, up.w, b_up): GELU's input (its ctx keeps the slope only)
    mlp_act    mlp.body.down.x
    mlp_out    linear_forward(down.x, down.w, b_down)

note: neither residual sum is in the ctx (backward does not need them), so resid1 and resid2 are
the same single `+` the block does, applied to the arrays above; tests check that resid2 equals
block_forward's own output.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.residual import block_backward, block_forward, init_block
from glassformer.errors import GlassformerError
from glassformer.explain.parts_attn import head_arrays
from glassformer.explain.parts_core import Part, lively, normal, shape_of, step
from glassformer.ops.linear import linear_forward

BLOCK_SIZES = {"batch": 1, "seq": 4, "d_model": 8, "heads": 2}


def gpt2_block_config(options: dict) -> BlockConfig:
    """GPT-2's layer: pre-norm LayerNorm, tanh GELU, biases everywhere, MLP width 4C."""
    if options["d_model"] % options["heads"]:
        raise GlassformerError(f"--heads {options['heads']} must divide --d-model "
                               f"{options['d_model']}")
    return BlockConfig(d_model=options["d_model"], n_head=options["heads"], mlp="gelu_tanh")


def layer_steps(bctx, x: np.ndarray, params: dict, prefix: str, *, key_prefix: str = "",
                brief: bool = False, **fmt) -> tuple[list, np.ndarray]:
    """The steps of one layer read off its BlockCtx, and the layer's output (resid2).

    params: holds f"{prefix}attn.bo", f"{prefix}mlp.b_up" and f"{prefix}mlp.b_down" when the
    layer has biases.
    brief: the shorter list `explain gpt2` prints per layer.
    """
    attn, mlp = bctx.attn.body, bctx.mlp.body
    weights = head_arrays(attn, attn.n_head)["weights"]              # (B, H, T, S)
    attn_out, _ = linear_forward(attn.out_proj.x, attn.out_proj.w, params.get(prefix + "attn.bo"))
    resid1 = x + attn_out            # the residual add (block_forward's one `+`), (B, T, C)
    mlp_up, _ = linear_forward(mlp.up.x, mlp.up.w, params.get(prefix + "mlp.b_up"))
    mlp_out, _ = linear_forward(mlp.down.x, mlp.down.w, params.get(prefix + "mlp.b_down"))
    resid2 = resid1 + mlp_out        # the second residual add, (B, T, C)
    c, f = x.shape[-1], mlp.down.x.shape[-1]
    rows = [
        ("norm1", attn.qkv_proj.x, f"LayerNorm(x) * w + b: {shape_of(attn.qkv_proj.x)}"),
        ("weights", weights, f"causal softmax per head: {shape_of(weights)} (B,H,T,S)"),
        ("merged", attn.out_proj.x, f"weights @ v, heads merged: {shape_of(attn.out_proj.x)}"),
        ("attn_out", attn_out, f"merged @ wo + bo: {shape_of(attn.out_proj.x)} -> "
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
        steps.append(step(key_prefix + name, value, algebra, text="layer:" + name, show=show,
                          **fmt))
    return steps, resid2


# Within one layer, the order block_backward reaches the parameters in.
LAYER_BACKWARD_ORDER = ("mlp.", "norm2.", "attn.", "norm1.")


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


def param_grad_steps(grads: dict, names, *, key_prefix: str = "d") -> list:
    """One line per parameter gradient, in the order the backward reaches them."""
    steps = []
    for name in sorted(names, key=_backward_rank):
        text = "common:dbk" if name.endswith("attn.bk") else "common:dparam"
        steps.append(step(key_prefix + name, grads[name], shape_of(grads[name]), text=text,
                          show="line", param=name))
    return steps


def _block_inputs(options: dict, rng):
    cfg = gpt2_block_config(options)
    b, t, c = options["batch"], options["seq"], cfg.d_model
    std = 1.0 / float(np.sqrt(c))
    params = lively(init_block(cfg, rng, std=std, out_std=std), rng, std=std)
    return {"x": normal(rng, (b, t, c)), **params}, {"cfg": cfg, "names": list(params)}


def _block_forward(inputs, static):
    params = {name: inputs[name] for name in static["names"]}
    return block_forward(params, inputs["x"], static["cfg"], causal=True)


def _block_backward(dout, ctx, static):
    grads, dx, _ = block_backward(dout, ctx)
    return {"x": dx, **grads}


def _block_steps(inputs, out, ctx, static):
    x = inputs["x"]
    steps = [step("x", x, shape_of(x), show="line")]
    steps += layer_steps(ctx, x, inputs, "")[0]
    steps.append(step("out", out, f"block_forward(x): {shape_of(out)}", show="line"))
    return steps


def _block_backward_steps(dout, grads, ctx, static):
    steps = [step("G", dout, shape_of(dout), text="common:G", show="line")]
    steps += param_grad_steps(grads, static["names"])
    steps.append(step("dx", grads["x"], f"G + d(attention path) + d(MLP path): "
                                        f"{shape_of(grads['x'])}", show="line"))
    return steps


def _all_inputs(inputs, static):
    return list(inputs)


BLOCK = Part(name="block", defaults=dict(BLOCK_SIZES), make_inputs=_block_inputs,
             forward=_block_forward, backward=_block_backward, forward_steps=_block_steps,
             backward_steps=_block_backward_steps, checked=_all_inputs)
