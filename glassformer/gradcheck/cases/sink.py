"""Gradcheck cases for the two softmax-stage ops of today's attention: the attention-sink softmax
(ops/sink.py, with a mask and a fully masked row) and logit soft-capping (ops/softcap.py)."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.attention import causal_mask
from glassformer.ops.sink import sink_softmax_backward, sink_softmax_forward
from glassformer.ops.softcap import softcap_backward, softcap_forward


def _sink_case(mode, mask):
    def make(rng):
        return {"x": rng.standard_normal((2, 3, 4, 4)),            # (B, H, T, S)
                "sinks": rng.standard_normal((3, 1, 1))}           # (H, 1, 1)

    def forward(inp):
        return sink_softmax_forward(inp["x"], inp["sinks"], mask=mask)

    def backward(dout, ctx):
        dx, dsinks = sink_softmax_backward(dout, ctx)
        return {"x": dx, "sinks": dsinks}

    return GradcheckCase("sink_softmax", mode, make, forward, backward)


def _empty_row() -> np.ndarray:
    mask = causal_mask(4, 4, window=2)
    mask[1] = False                                                 # query 1 sees no key at all
    return mask


def _softcap_case(mode, cap, spread):
    def make(rng):
        return {"x": spread * rng.standard_normal((2, 3, 5))}

    def forward(inp):
        return softcap_forward(inp["x"], cap)

    def backward(dout, ctx):
        return {"x": softcap_backward(dout, ctx)}

    return GradcheckCase("softcap", mode, make, forward, backward)


CASES = [
    _sink_case("plain", None),
    _sink_case("window-mask", causal_mask(4, 4, window=2)),
    _sink_case("empty-row", _empty_row()),
    _softcap_case("near-identity", 50.0, 1.0),
    _softcap_case("saturating", 2.0, 4.0),
]
