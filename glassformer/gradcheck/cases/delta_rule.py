"""Gradcheck cases for Gated DeltaNet's ops: the causal conv1d (with and without a tail), the
delta rule recurrent and chunked (with a state in and out, a chunk that does not divide T),
the l2 norm and the gated RMS norm."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.causal_conv1d import causal_conv1d_backward, causal_conv1d_forward
from glassformer.ops.delta_rule import delta_rule_backward, delta_rule_forward
from glassformer.ops.delta_rule_chunked import (delta_rule_chunked_backward,
                                                delta_rule_chunked_forward)
from glassformer.ops.gated_rms_norm import gated_rms_norm_backward, gated_rms_norm_forward
from glassformer.ops.l2_norm import l2_norm_backward, l2_norm_forward

_NAMES = ("q", "k", "v", "g", "beta")


def _conv_case(mode, *, tail):
    def make(rng):
        inp = {"x": rng.standard_normal((2, 5, 3)), "w": rng.standard_normal((3, 4))}
        if tail:
            inp["tail"] = rng.standard_normal((2, 3, 3))
        return inp

    def forward(inp):
        (y, new_tail), ctx = causal_conv1d_forward(inp["x"], inp["w"], tail=inp.get("tail"))
        return y, ctx

    def backward(dout, ctx):
        dx, dw, dtail = causal_conv1d_backward(dout, ctx)
        grads = {"x": dx, "w": dw}
        if tail:
            grads["tail"] = dtail
        return grads

    return GradcheckCase("causal_conv1d", mode, make, forward, backward)


def make_delta_inputs(rng, *, b=1, h=2, t=5, d_k=3, d_v=4, state=True):
    """Small float64 inputs for the delta rule: unit keys, g < 0, beta in (0, 1)."""
    k = rng.standard_normal((b, h, t, d_k))
    inp = {"q": rng.standard_normal((b, h, t, d_k)),
           "k": k / np.linalg.norm(k, axis=-1, keepdims=True),
           "v": rng.standard_normal((b, h, t, d_v)),
           "g": -rng.uniform(0.05, 1.0, (b, h, t)),
           "beta": rng.uniform(0.1, 0.9, (b, h, t))}
    if state:
        inp["state"] = rng.standard_normal((b, h, d_k, d_v))
    return inp


def _delta_case(mode, *, chunk_size, state):
    def make(rng):
        return make_delta_inputs(rng, state=state)

    def forward(inp):
        args = [inp[n] for n in _NAMES]
        if chunk_size is None:
            (out, last), ctx = delta_rule_forward(*args, state=inp.get("state"))
        else:
            (out, last), ctx = delta_rule_chunked_forward(*args, state=inp.get("state"),
                                                          chunk_size=chunk_size)
        # one output: the outputs and the last state, flattened together
        return np.concatenate([out.ravel(), last.ravel()]), (ctx, out.shape, last.shape)

    def backward(dout, saved):
        ctx, out_shape, last_shape = saved
        n_out = int(np.prod(out_shape))
        do, ds = dout[:n_out].reshape(out_shape), dout[n_out:].reshape(last_shape)
        step = delta_rule_backward if chunk_size is None else delta_rule_chunked_backward
        grads = dict(zip(_NAMES + ("state",), step(do, ctx, dstate=ds)))
        if not state:
            grads.pop("state")
        return grads

    name = "delta_rule" if chunk_size is None else "delta_rule_chunked"
    return GradcheckCase(name, mode, make, forward, backward)


def _l2_case():
    def make(rng):
        # note: gradcheck draws dout from the same seed; an x equal to dout is parallel to y,
        # where dx is ~0, so x is drawn after a throwaway draw.
        rng.standard_normal((3, 4))
        return {"x": rng.standard_normal((3, 4))}

    def forward(inp):
        return l2_norm_forward(inp["x"], eps=1e-6)

    def backward(dout, ctx):
        return {"x": l2_norm_backward(dout, ctx)}

    return GradcheckCase("l2_norm", "eps-1e-6", make, forward, backward)


def _gated_norm_case():
    def make(rng):
        return {"x": rng.standard_normal((2, 3, 5)), "z": rng.standard_normal((2, 3, 5)),
                "w": rng.standard_normal(5)}

    def forward(inp):
        return gated_rms_norm_forward(inp["x"], inp["z"], inp["w"], eps=1e-6)

    def backward(dout, ctx):
        dx, dz, dw = gated_rms_norm_backward(dout, ctx)
        return {"x": dx, "z": dz, "w": dw}

    return GradcheckCase("gated_rms_norm", "silu-gate", make, forward, backward)


CASES = [
    _conv_case("zeros-tail", tail=False),
    _conv_case("with-tail", tail=True),
    _delta_case("state", chunk_size=None, state=True),
    _delta_case("no-state", chunk_size=None, state=False),
    _delta_case("chunk-2-state", chunk_size=2, state=True),   # 5 tokens: the last chunk padded
    _delta_case("chunk-64", chunk_size=64, state=False),
    _l2_case(),
    _gated_norm_case(),
]
