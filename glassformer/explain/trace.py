"""Turn the attention ops' forward ctx and backward steps into named, ordered steps.

A trace is a list of `Step`s: a stable key (also the JSON key), the array, and the shape algebra
of the line that made it. Every number comes from the library's own ops: `linear_forward` for the
projections, `attention_forward` for the rest, its ctx for the scores and weights, and
`attention_backward_steps` / `linear_backward` for the gradients. Nothing is recomputed by hand here.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops.attention import (AttentionCtx, attention_backward_steps, attention_forward,
                                       attention_scores)
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.softmax import masked_logits


# Central-difference step for the on-screen check (see finite_difference_check).
WALKTHROUGH_FD_STEP = 1e-4


class Step(NamedTuple):
    key: str                 # stable name: the JSON key and the text key
    value: np.ndarray | float
    algebra: str             # how it was made, with shapes, e.g. "(1,3,4) @ (4,2) -> (1,3,2)"


class AttentionTrace(NamedTuple):
    """The forward steps plus the ctxs the backward needs (the same ones, not copies)."""
    steps: list[Step]
    proj_ctx: dict[str, LinearCtx]   # "Q", "K", "V" -> ctx of X @ W
    attn_ctx: AttentionCtx


def _shape(a) -> str:
    return "(" + ",".join(str(n) for n in np.shape(a)) + ")"


def _swap_last(shape: str) -> str:
    parts = shape.strip("()").split(",")
    parts[-2], parts[-1] = parts[-1], parts[-2]
    return "(" + ",".join(parts) + ")"


def trace_attention_forward(inputs: dict[str, np.ndarray], *, causal: bool) -> AttentionTrace:
    """Single-head self-attention on X with projections Wq, Wk, Wv, step by step."""
    x = inputs["X"]
    steps = [Step(name, inputs[name], _shape(inputs[name])) for name in ("X", "Wq", "Wk", "Wv")]
    proj, proj_ctx = {}, {}
    for name in ("Q", "K", "V"):
        weight = inputs["W" + name.lower()]
        proj[name], proj_ctx[name] = linear_forward(x, weight)   # (B, T, C) @ (C, D) -> (B, T, D)
        steps.append(Step(name, proj[name],
                          f"{_shape(x)} @ {_shape(weight)} -> {_shape(proj[name])}"))
    out, ctx = attention_forward(proj["Q"], proj["K"], proj["V"], causal=causal)
    t, s = proj["Q"].shape[-2], proj["K"].shape[-2]
    scores = attention_scores(ctx.q, ctx.k, ctx.scale)          # (B, T, S)
    allowed = np.ones((t, s), dtype=bool) if ctx.allowed is None else ctx.allowed
    weights = ctx.softmax.probs
    q_shape, k_shape = _shape(ctx.q), _shape(ctx.k)
    steps += [
        Step("scale", ctx.scale, f"1/sqrt(D={ctx.q.shape[-1]})"),
        Step("scores", scores, f"{q_shape} @ {_swap_last(k_shape)} -> {_shape(scores)}"),
        Step("mask", allowed, _shape(allowed)),
        Step("masked_scores", masked_logits(scores, ctx.allowed), _shape(scores)),
        Step("weights", weights, f"softmax over S: {_shape(weights)}"),
        Step("output", out, f"{_shape(weights)} @ {_shape(ctx.v)} -> {_shape(out)}"),
    ]
    return AttentionTrace(steps=steps, proj_ctx=proj_ctx, attn_ctx=ctx)


def trace_attention_backward(trace: AttentionTrace, dout: np.ndarray) -> list[Step]:
    """The backward of `trace_attention_forward` for L = sum(output * G), G = dout."""
    ctx = trace.attn_ctx
    grads = attention_backward_steps(dout, ctx)
    dx_q, dwq, _ = linear_backward(grads.dq, trace.proj_ctx["Q"])
    dx_k, dwk, _ = linear_backward(grads.dk, trace.proj_ctx["K"])
    dx_v, dwv, _ = linear_backward(grads.dv, trace.proj_ctx["V"])
    # Fan-out: X fed all three projections, so its gradient is the sum of the three paths.
    dx = dx_q + dx_k + dx_v
    w, v, q, k = ctx.softmax.probs, ctx.v, ctx.q, ctx.k
    x = trace.proj_ctx["Q"].x
    return [
        Step("G", dout, _shape(dout)),
        Step("dweights", grads.dweights, f"{_shape(dout)} @ {_swap_last(_shape(v))} -> "
                                         f"{_shape(grads.dweights)}"),
        Step("dV", grads.dv, f"{_swap_last(_shape(w))} @ {_shape(dout)} -> {_shape(grads.dv)}"),
        Step("dscores", grads.dscores, f"w * (dw - rowsum(dw * w)): {_shape(grads.dscores)}"),
        Step("dQ", grads.dq, f"{_shape(grads.dscores)} @ {_shape(k)} * scale -> "
                             f"{_shape(grads.dq)}"),
        Step("dK", grads.dk, f"{_swap_last(_shape(grads.dscores))} @ {_shape(q)} * scale -> "
                             f"{_shape(grads.dk)}"),
        Step("dWq", dwq, f"X^T @ dQ summed over B, T -> {_shape(dwq)}"),
        Step("dWk", dwk, f"X^T @ dK summed over B, T -> {_shape(dwk)}"),
        Step("dWv", dwv, f"X^T @ dV summed over B, T -> {_shape(dwv)}"),
        Step("dX", dx, f"dQ Wq^T + dK Wk^T + dV Wv^T -> {_shape(x)}"),
    ]


def walkthrough_gradients(inputs: dict[str, np.ndarray], dout: np.ndarray, *,
                          causal: bool) -> dict[str, np.ndarray]:
    """dX, dWq, dWk, dWv of L = sum(attention(X) * G): the same trace, used by the check."""
    steps = trace_attention_backward(trace_attention_forward(inputs, causal=causal), dout)
    by_key = {step.key: step.value for step in steps}
    return {"X": by_key["dX"], "Wq": by_key["dWq"], "Wk": by_key["dWk"], "Wv": by_key["dWv"]}


def finite_difference_check(inputs: dict[str, np.ndarray], dout: np.ndarray, *,
                            causal: bool) -> dict[str, float]:
    """Relative error of dX, dWq, dWk, dWv against float64 central differences."""
    from glassformer.gradcheck import gradcheck

    inputs64 = {name: value.astype(np.float64) for name, value in inputs.items()}

    def forward(inp):
        trace = trace_attention_forward(inp, causal=causal)
        return trace.steps[-1].value, inp

    def backward(g, inp):
        return walkthrough_gradients(inp, g, causal=causal)

    # note: the seed's gradients are tiny (~1e-6, its scores are ~1e-3), so float64 rounding in
    # L dominates a 1e-6 step; a 1e-4 step keeps truncation (~step^2) and rounding both small.
    return gradcheck(forward, backward, inputs64, dout=dout.astype(np.float64),
                     eps=WALKTHROUGH_FD_STEP)
