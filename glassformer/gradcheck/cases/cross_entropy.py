"""Gradcheck cases for log-softmax and for cross-entropy (plain, ignore_index, label smoothing)."""
from __future__ import annotations

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.cross_entropy import (cross_entropy_backward, cross_entropy_forward,
                                           log_softmax_backward, log_softmax_forward)


def _log_softmax_case(mode, shape):
    def make(rng):
        return {"x": rng.standard_normal(shape)}

    def forward(inp):
        return log_softmax_forward(inp["x"])

    def backward(dout, ctx):
        return {"x": log_softmax_backward(dout, ctx)}

    return GradcheckCase("log_softmax", mode, make, forward, backward)


def _ce_case(mode, *, shape, ignored=(), ignore_index=-100, smoothing=0.0):
    """shape is the logits' (..., V); `ignored` lists flat positions set to ignore_index."""
    def make(rng):
        logits = rng.standard_normal(shape)
        targets = rng.integers(0, shape[-1], size=shape[:-1])
        targets.reshape(-1)[list(ignored)] = ignore_index
        return {"logits": logits, "targets": targets}

    def forward(inp):
        return cross_entropy_forward(inp["logits"], inp["targets"], ignore_index=ignore_index,
                                     label_smoothing=smoothing)

    def backward(dout, ctx):
        return {"logits": cross_entropy_backward(dout, ctx)}

    return GradcheckCase("cross_entropy", mode, make, forward, backward)


CASES = [
    _log_softmax_case("2d", (3, 5)),
    _log_softmax_case("3d", (2, 3, 4)),
    _ce_case("plain-NV", shape=(4, 5)),
    _ce_case("plain-BTV", shape=(2, 3, 5)),
    _ce_case("ignore-index", shape=(2, 3, 5), ignored=(1, 4)),
    _ce_case("ignore-index-0", shape=(2, 3, 5), ignored=(2,), ignore_index=0),
    _ce_case("label-smoothing", shape=(2, 3, 5), smoothing=0.1),
    _ce_case("smoothing-and-ignore", shape=(2, 3, 5), ignored=(0, 5), smoothing=0.3),
    _ce_case("all-ignored", shape=(2, 4), ignored=(0, 1)),
]
