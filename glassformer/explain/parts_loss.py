"""`explain softmax` and `explain cross_entropy`: ops/softmax.py and ops/cross_entropy.py.

Softmax keeps only its probabilities. Cross-entropy keeps the probabilities, the targets and the
count n_valid; its log-probabilities are not kept (backward works from the probabilities), so the
trace calls `log_softmax_forward`, the op cross-entropy itself runs, to show them.
"""
from __future__ import annotations

import numpy as np

from glassformer.explain.parts_core import Part, normal, shape_of, step
from glassformer.ops.cross_entropy import (cross_entropy_backward, cross_entropy_forward,
                                           log_softmax_forward)
from glassformer.ops.softmax import softmax_backward, softmax_forward

# Spread of the random logits: wide enough that the distributions are clearly not uniform.
LOGIT_STD = 2.0
# Added to every logit to show the max-subtraction at work: exp(1000) overflows float32 and
# float64, yet softmax gives the same probabilities.
BIG_SHIFT = 1000.0
SOFTMAX_SIZES = {"batch": 1, "seq": 3, "d_model": 4}     # rows (B, T) of S = C scores
CROSS_ENTROPY_SIZES = {"batch": 2, "seq": 2, "d_model": 5}   # (B, T) positions, V = C classes


# ---------------------------------------------------------------- softmax

def _softmax_inputs(options: dict, rng):
    shape = (options["batch"], options["seq"], options["d_model"])
    return {"x": normal(rng, shape, std=LOGIT_STD)}, {}


def _softmax_forward(inputs, static):
    return softmax_forward(inputs["x"])


def _softmax_backward(dout, ctx, static):
    return {"x": softmax_backward(dout, ctx)}


def _softmax_steps(inputs, probs, ctx, static):
    x = inputs["x"]
    shifted = x + BIG_SHIFT
    shifted_probs, _ = softmax_forward(shifted)
    return [step("x", x, shape_of(x)),
            step("probs", ctx.probs, f"exp(x - rowmax) / rowsum: {shape_of(probs)}  "
                                     f"(ctx.probs)"),
            step("x_shifted", shifted, f"x + {BIG_SHIFT:g}: {shape_of(shifted)}"),
            step("probs_shifted", shifted_probs, f"softmax(x + {BIG_SHIFT:g}): "
                                                 f"{shape_of(shifted_probs)}")]


def _softmax_backward_steps(dout, grads, ctx, static):
    return [step("G", dout, shape_of(dout), text="common:G"),
            step("dx", grads["x"], f"p * (G - rowsum(G * p)): {shape_of(grads['x'])}")]


def _x_only(inputs, static):
    return ["x"]


SOFTMAX = Part(name="softmax", defaults=dict(SOFTMAX_SIZES), make_inputs=_softmax_inputs,
               forward=_softmax_forward, backward=_softmax_backward,
               forward_steps=_softmax_steps, backward_steps=_softmax_backward_steps,
               checked=_x_only)


# ---------------------------------------------------------------- cross_entropy

def _cross_entropy_inputs(options: dict, rng):
    b, t, v = options["batch"], options["seq"], options["d_model"]
    logits = normal(rng, (b, t, v), std=LOGIT_STD)                    # (B, T, V)
    targets = rng.integers(0, v, size=(b, t))                         # (B, T)
    return {"logits": logits, "targets": targets}, {}


def _cross_entropy_forward(inputs, static):
    return cross_entropy_forward(inputs["logits"], inputs["targets"])


def _cross_entropy_backward(dout, ctx, static):
    return {"logits": cross_entropy_backward(dout, ctx)}


def _cross_entropy_steps(inputs, loss, ctx, static):
    logits, targets = inputs["logits"], inputs["targets"]
    n_classes = logits.shape[-1]
    logp, _ = log_softmax_forward(logits)                             # (B, T, V)
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]   # (B, T, V) -> (B, T)
    onehot = np.eye(n_classes, dtype=logits.dtype)[targets]           # (B, T) -> (B, T, V)
    return [step("logits", logits, shape_of(logits)),
            step("targets", targets, f"{shape_of(targets)} ids in [0, V={n_classes})"),
            step("log_probs", logp, f"(x - rowmax) - log rowsum exp(x - rowmax): "
                                    f"{shape_of(logp)}"),
            step("picked", picked, f"log_probs[..., target]: {shape_of(logp)} -> "
                                   f"{shape_of(picked)}"),
            step("n_valid", ctx.n_valid, "count(targets != ignore_index)  (ctx.n_valid)"),
            step("loss", loss, f"-sum(picked) / n_valid: {shape_of(picked)} -> ()"),
            step("probs", ctx.probs, f"exp(x - rowmax) / rowsum: {shape_of(ctx.probs)}  "
                                     f"(ctx.probs)"),
            step("onehot", onehot, f"eye(V)[targets]: {shape_of(onehot)}")]


def _cross_entropy_backward_steps(dout, grads, ctx, static):
    dlogits = grads["logits"]
    return [step("G", dout, "()", text="G_loss"),
            step("dlogits", dlogits, f"(probs - onehot) * G / n_valid: {shape_of(dlogits)}")]


def _logits_only(inputs, static):
    return ["logits"]


CROSS_ENTROPY = Part(name="cross_entropy", defaults=dict(CROSS_ENTROPY_SIZES),
                     make_inputs=_cross_entropy_inputs, forward=_cross_entropy_forward,
                     backward=_cross_entropy_backward, forward_steps=_cross_entropy_steps,
                     backward_steps=_cross_entropy_backward_steps, checked=_logits_only)
