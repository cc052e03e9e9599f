"""A projection: x @ W (+ b), plus W's LoRA adapter when the params hold one.

Every linear layer of the blocks (attention's wq, wk, wv, wo; the MLP's w_up, w_gate, w_down)
runs through this pair, so a block never asks whether a weight is adapted: `projection_forward`
looks the adapter up by the weight's name (blocks/lora.py) and runs ops/linear.py's plain product
or ops/lora.py's adapted one; `projection_backward` returns the grads under the names they belong
to (the weight's, or its adapter's two). `init_projections` draws a sub-block's fresh weights.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.lora import LORA_A, LORA_B, adapter_name, adapter_of
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.lora import LoraLinearCtx, lora_backward, lora_forward


def projection_forward(params: dict, weight: str, bias: str | None, x: np.ndarray, *,
                       frozen: bool = False, train: bool = False,
                       rng: np.random.Generator | None = None):
    """x @ params[weight] (+ params[bias]), plus the adapter on `weight` if params hold one.

    x (..., C_in) -> (..., C_out); returns (y, ctx), ctx a LinearCtx or a LoraLinearCtx.
    frozen: the base weight takes no gradient (always so when it has an adapter).
    """
    b = params.get(bias) if bias is not None else None
    adapter = adapter_of(params, weight)
    if adapter is None:
        return linear_forward(x, params[weight], b, frozen=frozen)
    return lora_forward(x, params[weight], b, adapter.a, adapter.b, scale=adapter.scale,
                        dropout=adapter.dropout, train=train, rng=rng)


def projection_backward(dy: np.ndarray, ctx: LinearCtx | LoraLinearCtx, weight: str
                        ) -> tuple[np.ndarray, dict, np.ndarray | None]:
    """Returns (dx, grads, dbias): grads holds the weight's grad, or its adapter's two, or nothing
    when the weight is frozen; dbias is the bias's grad, None when there is none or it is frozen.
    (The caller places dbias, so grads keep the order they always had.)"""
    if isinstance(ctx, LoraLinearCtx):
        dx, _, _, da, db = lora_backward(dy, ctx)   # the base is frozen: no dW, no dbias
        return dx, {adapter_name(weight, LORA_A): da, adapter_name(weight, LORA_B): db}, None
    dx, dw, dbias = linear_backward(dy, ctx)
    return dx, ({} if dw is None else {weight: dw}), dbias


def init_projections(shapes: dict, rng: np.random.Generator, *, std: float, out_std: float,
                     out_weight: str, dtype=np.float32) -> dict:
    """Fresh params for `shapes` (name -> shape), drawn in its order: Normal(0, out_std) for
    `out_weight`, the projection that writes into the residual, Normal(0, std) for the other
    weights, zero biases (names starting with "b") and norm scales of 1 (names ending in "_norm"
    or "norm.w"). Attention, MLA and the MLP draw theirs here."""
    params = {}
    for name, shape in shapes.items():
        if name.startswith("b"):                                # bq, ..., bo; b_up, b_down
            params[name] = np.zeros(shape, dtype)
        elif name.endswith(("_norm", "norm.w")):                # q_norm, k_norm; kv_norm.w
            params[name] = np.ones(shape, dtype)
        else:
            scale = out_std if name == out_weight else std
            params[name] = (rng.standard_normal(shape) * scale).astype(dtype)
    return params
