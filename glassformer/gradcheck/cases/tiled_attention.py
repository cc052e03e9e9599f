"""Gradcheck cases for tiled attention (ops/tiled_attention.py), with tiles small enough that
every case spans several query and key tiles: plain, causal, causal over a longer cache, padding
mask, a row that sees nothing, GQA, ALiBi, sliding window, soft cap, sinks."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.cases.attention import qkv_inputs
from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.position import alibi_bias
from glassformer.ops.tiled_attention import tiled_attention_backward, tiled_attention_forward

TILES = {"query_tile": 2, "key_tile": 3}   # T, S of 5-7: two to four tiles each way
# (backward is tiled its own way, 3 x 2: the saved logsumexp is per row)


def _qkv(rng, **sizes):
    """The attention cases' inputs (cases/attention.py), 5 queries and keys by default."""
    return qkv_inputs(rng, **({"t": 5, "s": 5} | sizes))


def _case(mode, make, *, causal=False, window=None, softcap=None):
    def forward(inp):
        return tiled_attention_forward(inp["q"], inp["k"], inp["v"], mask=inp.get("mask"),
                                       causal=causal, bias=inp.get("bias"), window=window,
                                       softcap=softcap, sinks=inp.get("sinks"), **TILES)

    def backward(dout, ctx):
        grads = tiled_attention_backward(dout, ctx, query_tile=3, key_tile=2)
        return dict(zip(("q", "k", "v", "sinks"), grads))

    return GradcheckCase("tiled_attention", mode, make, forward, backward)


def _padding(rng):
    inputs = _qkv(rng)
    mask = np.arange(5)[None, :] < np.array([5, 2])[:, None]   # (B, S): item 1 has 2 real keys
    inputs["mask"] = mask[:, None, None, :]                    # (B, 1, 1, S)
    return inputs


def _fully_masked(rng):
    inputs = _qkv(rng)
    mask = np.ones((5, 5), dtype=bool)
    mask[3] = False                                            # query 3 may see nothing
    inputs["mask"] = mask
    return inputs


def _alibi(rng):
    inputs = _qkv(rng, lead_q=(2, 4), t=4, s=7)                # H = 4, 3 cached keys
    inputs["bias"] = alibi_bias(4, 4, 7, dtype=np.float64)     # (H, T, S)
    return inputs


def _sinks(rng, lead_q=(2, 3), lead_kv=None, t=5, s=5):
    inputs = _qkv(rng, lead_q=lead_q, lead_kv=lead_kv, t=t, s=s)
    inputs["sinks"] = rng.standard_normal(lead_q[1:] + (1, 1))  # (H, 1, 1)
    return inputs


CASES = [
    _case("plain", _qkv),
    _case("causal", _qkv, causal=True),
    _case("causal-cached", lambda rng: _qkv(rng, t=3, s=7), causal=True),
    _case("padding", _padding, causal=True),
    _case("fully-masked-row", _fully_masked),
    _case("gqa-broadcast", lambda rng: _qkv(rng, lead_q=(1, 2, 3), lead_kv=(1, 2, 1)),
          causal=True),
    _case("alibi", _alibi, causal=True),
    _case("window", lambda rng: _qkv(rng, t=7, s=7), causal=True, window=3),
    _case("softcap", lambda rng: _qkv(rng) | {"q": 3 * rng.standard_normal((2, 2, 5, 4))},
          causal=True, softcap=2.0),
    _case("sinks", _sinks, causal=True, window=2),
    _case("sinks-gqa", lambda rng: _sinks(rng, lead_q=(1, 2, 3), lead_kv=(1, 2, 1), t=3, s=6),
          causal=True),
]
