"""Full attention with an output gate: the full-attention layers of Qwen3-Next and Qwen3.5.

    q = x W_q, gate = x W_gate          (B, T, H*D) each (one joined, per-head interleaved
                                        product in the checkpoints: io/hf/qwen3_next.py splits it)
    k = x W_k, v = x W_v                (B, T, K*D)
    q, k <- RMSNorm over each head's D  (ops/rms_norm.py; scales q_norm, k_norm)
    q, k <- RoPE on their first R dims  (R = D * partial_rotary_factor; the rest passes)
    o    = softmax(q k^T / sqrt(D)) v   grouped KV heads, causal, padding masked
    y    = (o * sigmoid(gate)) W_o      the gate lets each head output say "nothing here"

As transformers' `Qwen3NextAttention` (no biases). Params (block-local): wq, w_gate (C, H*D),
wk, wv (C, K*D), q_norm, k_norm (D,), wo (H*D, C). Cached decoding writes keys and values to
`kv_cache` at `layer` (blocks/kv_cache.py, or the hybrid cache of blocks/delta_state.py) and
keeps no ctx.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.heads import merge_heads, split_heads
from glassformer.errors import GlassformerError
from glassformer.ops.activation import SigmoidCtx, sigmoid_backward, sigmoid_forward
from glassformer.ops.attention import AttentionCtx, attention_backward, attention_forward
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.rms_norm import RMSNormCtx, rms_norm_backward, rms_norm_forward
from glassformer.ops.rope import RopeCtx, rope_backward, rope_forward


class GatedAttentionCtx(NamedTuple):
    proj: dict                   # name -> LinearCtx of wq, w_gate, wk, wv
    q_norm: RMSNormCtx
    k_norm: RMSNormCtx
    q_rope: RopeCtx
    k_rope: RopeCtx
    attn: AttentionCtx
    gate: SigmoidCtx
    merged: np.ndarray           # o (B, T, H*D) before the gate
    gate_out: np.ndarray         # sigmoid(gate) (B, T, H*D)
    out: LinearCtx
    n_head: int
    n_kv: int
    rot: int                     # R, the rotated dims


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray):
    """RoPE on x's first R = cos.shape[-1] dims; the rest passes through. x (B, n, T, D)."""
    rot = cos.shape[-1]
    if cos.ndim == 3:                                   # per-row positions (B, T, R)
        cos, sin = cos[:, None], sin[:, None]
    turned, ctx = rope_forward(x[..., :rot], cos, sin)
    return np.concatenate([turned, x[..., rot:]], axis=-1), ctx


def gated_attention_forward(params: dict, x: np.ndarray, *, n_head: int, n_kv: int,
                            eps: float, rope_tables: tuple[np.ndarray, np.ndarray],
                            key_mask: np.ndarray | None = None, kv_cache=None, layer: int = 0
                            ) -> tuple[np.ndarray, GatedAttentionCtx | None]:
    """x (B, T, C) -> (B, T, C). rope_tables: (cos, sin), (T, R) or (B, T, R), for this call's
    positions. key_mask (B, S): True for real keys, S counting cached ones."""
    b, t, _ = x.shape
    proj, outs = {}, {}
    for name in ("wq", "w_gate", "wk", "wv"):
        outs[name], proj[name] = linear_forward(x, params[name])
    q = split_heads(outs["wq"], n_head)                                     # (B, H, T, D)
    k = split_heads(outs["wk"], n_kv)                                       # (B, K, T, D)
    v = split_heads(outs["wv"], n_kv)
    q, q_norm = rms_norm_forward(q, params["q_norm"], eps=eps)
    k, k_norm = rms_norm_forward(k, params["k_norm"], eps=eps)
    cos, sin = rope_tables
    q, q_rope = _rotate(q, cos, sin)
    k, k_rope = _rotate(k, cos, sin)
    if kv_cache is not None:
        k, v = kv_cache.write(layer, k, v)                                  # (B, K, S, D)
    mask = None if key_mask is None else key_mask[:, None, None, None, :]   # (B, 1, 1, 1, S)
    group = n_head // n_kv
    o, attn = attention_forward(q.reshape(b, n_kv, group, t, -1), k[:, :, None], v[:, :, None],
                                mask=mask, causal=True, keep_weights=kv_cache is None)
    merged = merge_heads(o.reshape(b, n_head, t, -1))                       # (B, T, H*D)
    gate_out, gate_ctx = sigmoid_forward(outs["w_gate"])
    y, out_ctx = linear_forward(merged * gate_out, params["wo"])            # (B, T, C)
    if kv_cache is not None:
        return y, None
    return y, GatedAttentionCtx(proj, q_norm, k_norm, q_rope, k_rope, attn, gate_ctx, merged,
                                gate_out, out_ctx, n_head, n_kv, cos.shape[-1])


def gated_attention_backward(dy: np.ndarray, ctx: GatedAttentionCtx | None
                             ) -> tuple[dict, np.ndarray]:
    """(grads under the forward's local names, dx)."""
    if ctx is None:
        raise GlassformerError("a forward run with a KV cache is inference only; "
                               "run the forward without kv_cache to train")
    grads, douts = {}, {}
    dgated, grads["wo"], _ = linear_backward(dy, ctx.out)
    douts["w_gate"] = sigmoid_backward(dgated * ctx.merged, ctx.gate)
    dmerged = dgated * ctx.gate_out                                         # (B, T, H*D)
    b, t, _ = dy.shape
    do = split_heads(dmerged, ctx.n_head).reshape(b, ctx.n_kv, ctx.n_head // ctx.n_kv, t, -1)
    dq, dk, dv = attention_backward(do, ctx.attn)[:3]
    dq = dq.reshape(b, ctx.n_head, t, -1)                                   # (B, H, T, D)
    dk, dv = dk.sum(axis=2), dv.sum(axis=2)                                 # (B, K, T, D)
    r = ctx.rot
    dq = np.concatenate([rope_backward(dq[..., :r], ctx.q_rope), dq[..., r:]], axis=-1)
    dk = np.concatenate([rope_backward(dk[..., :r], ctx.k_rope), dk[..., r:]], axis=-1)
    dq, grads["q_norm"] = rms_norm_backward(dq, ctx.q_norm)
    dk, grads["k_norm"] = rms_norm_backward(dk, ctx.k_norm)
    douts.update(wq=merge_heads(dq), wk=merge_heads(dk), wv=merge_heads(dv))
    dx = None
    for name in ("wq", "w_gate", "wk", "wv"):
        part, grads[name], _ = linear_backward(douts[name], ctx.proj[name])
        dx = part if dx is None else dx + part                              # fan-out: four products
    return grads, dx


def gated_attention_shapes(d_model: int, n_head: int, n_kv: int, head_dim: int) -> dict:
    """Block-local names and shapes, in init's order."""
    c, hd, kd = d_model, n_head * head_dim, n_kv * head_dim
    return {"wq": (c, hd), "w_gate": (c, hd), "wk": (c, kd), "wv": (c, kd),
            "q_norm": (head_dim,), "k_norm": (head_dim,), "wo": (hd, c)}


def init_gated_attention(shapes: dict, rng: np.random.Generator, *, std: float,
                         out_std: float, dtype=np.float32) -> dict:
    """Normal(0, std) projections (wo at out_std), norm scales 1."""
    params = {}
    for name, shape in shapes.items():
        if name in ("q_norm", "k_norm"):
            params[name] = np.ones(shape, dtype)
        else:
            scale = out_std if name == "wo" else std
            params[name] = (rng.standard_normal(shape) * scale).astype(dtype)
    return params
