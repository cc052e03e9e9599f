"""Gradcheck cases for RoPE: heads, a position offset (cached decoding), one new token, another
theta, and a bare (T, D) input. The cos/sin tables are constants, so only x is checked."""
from __future__ import annotations

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.rope import rope_backward, rope_forward, rope_tables


def _case(mode, shape, *, offset=0, theta=10000.0):
    def make(rng):
        return {"x": rng.standard_normal(shape)}

    def forward(inp):
        x = inp["x"]
        t, d = x.shape[-2], x.shape[-1]
        # the tables in x's dtype: float64 here, float32 when `explain rope` shows this case
        cos, sin = rope_tables(t, d, theta=theta, offset=offset, dtype=x.dtype)   # (T, D)
        return rope_forward(x, cos, sin)

    def backward(dout, ctx):
        return {"x": rope_backward(dout, ctx)}

    return GradcheckCase("rope", mode, make, forward, backward)


CASES = [
    _case("heads", (2, 2, 3, 4)),                   # (B, H, T, D)
    _case("offset", (1, 2, 3, 6), offset=5),        # 3 new tokens after 5 cached ones
    _case("decode-step", (2, 2, 1, 4), offset=9),   # one token at position 9
    _case("theta-100", (2, 4, 8), theta=100.0),     # (B, T, D), faster-turning pairs
    _case("no-lead", (5, 4)),                       # (T, D)
]
