"""GeGLU with tanh GELU, the gated activation of Gemma's MLP (Shazeer 2020).

    geglu(gate, up) = gelu_tanh(gate) * up      gate, up (..., F) -> (..., F)

Matches HF's `Gemma3MLP`: `act_fn(gate_proj(x)) * up_proj(x)` with hidden_activation
"gelu_pytorch_tanh". The same product rule as ops/swiglu.py, with GELU's backward in SiLU's place:

    dup   = dout * a,   a = gelu_tanh(gate)
    dgate = gelu_backward(dout * up)

ctx keeps `up`, a, and GELU's ctx (its slope; none when the forward ran for inference only).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float, check_same_dtype, check_shape
from glassformer.ops.activation import GeluCtx, gelu_backward, gelu_forward


class GegluCtx(NamedTuple):
    """Saved by `geglu_forward`: the linear branch `up`, a = gelu_tanh(gate), GELU's ctx."""
    up: np.ndarray
    activated: np.ndarray
    gelu: GeluCtx


def geglu_forward(gate: np.ndarray, up: np.ndarray, *, inference: bool = False
                  ) -> tuple[np.ndarray, GegluCtx]:
    """gelu_tanh(gate) * up, elementwise, (..., F) each -> (..., F). inference: keep no slope.

    >>> out, _ = geglu_forward(np.array([0.0, 1.0]), np.array([5.0, 2.0]))
    >>> np.round(out, 6).tolist()
    [0.0, 1.682392]
    """
    check_float("gate", gate)
    check_float("up", up)
    check_same_dtype(gate=gate, up=up)
    sizes: dict = {}
    check_shape("gate", gate, ("...", "F"), sizes)
    check_shape("up", up, ("...", "F"), sizes)
    activated, gelu_ctx = gelu_forward(gate, approximate="tanh", keep_slope=not inference)
    return activated * up, GegluCtx(up=up, activated=activated, gelu=gelu_ctx)


def geglu_backward(dout: np.ndarray, ctx: GegluCtx) -> tuple[np.ndarray, np.ndarray]:
    """Returns (dgate, dup), each (..., F)."""
    dup = dout * ctx.activated
    dgate = gelu_backward(dout * ctx.up, ctx.gelu)
    return dgate, dup
