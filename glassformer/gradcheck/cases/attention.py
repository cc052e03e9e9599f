"""Gradcheck cases for the attention op: plain, causal, padding mask, S != T, fully masked row, GQA,
ALiBi bias, sliding window (full and cached), soft-capped scores, attention sinks (with GQA)."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.attention import attention_backward, attention_forward
from glassformer.ops.position import alibi_bias


def qkv_inputs(rng, lead_q=(2, 2), lead_kv=None, t=3, s=3, d=4, dv=3):
    """{q, k, v} float64 draws: q (*lead_q, T, D), k (*lead_kv, S, D), v (*lead_kv, S, Dv)."""
    lead_kv = lead_q if lead_kv is None else lead_kv
    return {
        "q": rng.standard_normal(lead_q + (t, d)),
        "k": rng.standard_normal(lead_kv + (s, d)),
        "v": rng.standard_normal(lead_kv + (s, dv)),
    }


def _case(mode, make, *, causal=False, window=None, softcap=None):
    def forward(inp):
        return attention_forward(inp["q"], inp["k"], inp["v"], mask=inp.get("mask"),
                                 causal=causal, bias=inp.get("bias"), window=window,
                                 softcap=softcap, sinks=inp.get("sinks"))

    def backward(dout, ctx):
        grads = attention_backward(dout, ctx)
        return dict(zip(("q", "k", "v", "sinks"), grads))

    return GradcheckCase("attention", mode, make, forward, backward)


def _padding(rng):
    inputs = qkv_inputs(rng, t=4, s=4)
    lengths = np.array([4, 2])                              # batch item 1 has 2 real keys
    mask = np.arange(4)[None, :] < lengths[:, None]         # (B, S)
    inputs["mask"] = mask[:, None, None, :]                 # (B, 1, 1, S): broadcast over H, T
    return inputs


def _fully_masked(rng):
    inputs = qkv_inputs(rng)
    mask = np.ones((3, 3), dtype=bool)
    mask[1] = False                                          # query 1 may see nothing
    inputs["mask"] = mask
    return inputs


def _alibi(rng):
    inputs = qkv_inputs(rng, lead_q=(2, 4), t=3, s=5)             # H = 4 heads, 2 cached keys
    inputs["bias"] = alibi_bias(4, 3, 5, dtype=np.float64)  # (H, T, S), broadcast over B
    return inputs


def _sinks(rng, lead_q=(2, 3), lead_kv=None, t=4, s=4):
    inputs = qkv_inputs(rng, lead_q=lead_q, lead_kv=lead_kv, t=t, s=s)
    inputs["sinks"] = rng.standard_normal(lead_q[1:] + (1, 1))    # (H, 1, 1): one per head
    return inputs


CASES = [
    _case("plain", qkv_inputs),
    _case("causal", qkv_inputs, causal=True),
    _case("padding", _padding),
    _case("cross", lambda rng: qkv_inputs(rng, t=2, s=5)),
    _case("causal-cached", lambda rng: qkv_inputs(rng, t=2, s=5), causal=True),
    _case("fully-masked-row", _fully_masked),
    _case("gqa-broadcast", lambda rng: qkv_inputs(rng, lead_q=(1, 2, 3), lead_kv=(1, 2, 1))),
    _case("alibi", _alibi, causal=True),
    _case("window", lambda rng: qkv_inputs(rng, t=5, s=5), causal=True, window=2),
    _case("window-cached", lambda rng: qkv_inputs(rng, t=2, s=6), causal=True, window=3),
    _case("softcap", lambda rng: qkv_inputs(rng) | {"q": 3 * rng.standard_normal((2, 2, 3, 4))},
          causal=True, softcap=2.0),
    _case("sinks", _sinks, causal=True, window=2),
    _case("sinks-gqa", lambda rng: _sinks(rng, lead_q=(1, 2, 3), lead_kv=(1, 2, 1), t=2, s=5),
          causal=True),
]
