"""Gated DeltaNet, the linear-attention token mixer of Qwen3-Next and Qwen3.5 (3 layers in 4).

    x (B, T, C) -> [q | k | v] = x W_qkv              (B, T, 2 Hk Dk + Hv Dv)
                -> causal depthwise conv1d, then SiLU  (ops/causal_conv1d.py; a tail when decoding)
                -> q, k l2-normalised per head         (ops/l2_norm.py), k heads repeated to Hv
                   beta = sigmoid(x W_b)               (B, T, Hv): how much of the error to write
                   g = -exp(a_log) softplus(x W_a + dt_bias)   (B, T, Hv): the decay, in log space
                -> the gated delta rule                 (ops/delta_rule*.py): a (Dk, Dv) state/head
                -> gated RMS norm by z = x W_z          (ops/gated_rms_norm.py), per head
                -> W_o                                  (B, T, C)

Params (block-local): wq, wk (C, Hk*Dk), wv, wz (C, Hv*Dv), wb, wa (C, Hv), conv (Dc, W) with
Dc = 2 Hk Dk + Hv Dv in q|k|v order, dt_bias, a_log (Hv,), norm (Dv,), wo (Hv*Dv, C).
As transformers' `Qwen3NextGatedDeltaNet` / `Qwen3_5GatedDeltaNet` (the checkpoints' joined and
interleaved projections are split into these on load: io/hf/qwen3_next.py). Padding positions
(key_mask False) are zeroed before the projections, as transformers does, so a left-padded row's
state starts at zero at its first real token.

A prompt (or training) runs the chunked form; one decoded token with a state runs the recurrent
form. `state` (blocks/delta_state.py: this layer's conv tail and (Hv, Dk, Dv) matrices) is read
and replaced in place when given: inference only.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dataclasses import dataclass

from glassformer.blocks.delta_state import LayerState
from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.activation import (SigmoidCtx, SiluCtx, sigmoid_backward, sigmoid_forward,
                                        silu_backward, silu_forward)
from glassformer.ops.causal_conv1d import (CausalConv1dCtx, causal_conv1d_backward,
                                           causal_conv1d_forward)
from glassformer.ops.delta_rule import delta_rule_backward, delta_rule_forward
from glassformer.ops.delta_rule_chunked import (delta_rule_chunked_backward,
                                                delta_rule_chunked_forward)
from glassformer.ops.gated_rms_norm import (GatedRMSNormCtx, gated_rms_norm_backward,
                                            gated_rms_norm_forward)
from glassformer.ops.l2_norm import L2NormCtx, l2_norm_backward, l2_norm_forward
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.softplus import SoftplusCtx, softplus_backward, softplus_forward

L2_EPS = 1e-6   # transformers' l2norm eps (FLA's)


@dataclass(frozen=True)
class GatedDeltaConfig:
    """The widths of one Gated DeltaNet layer (transformers' linear_* config keys)."""
    d_model: int                # C
    k_heads: int                # Hk, query/key heads (linear_num_key_heads)
    v_heads: int                # Hv, value heads, a multiple of Hk (linear_num_value_heads)
    k_head_dim: int             # Dk (linear_key_head_dim)
    v_head_dim: int             # Dv (linear_value_head_dim)
    conv_width: int = 4         # W, the conv1d taps (linear_conv_kernel_dim)
    norm_eps: float = 1e-6      # the gated RMS norm's eps (rms_norm_eps)
    chunk_size: int = 64        # tokens per chunk of the chunked form (transformers' 64)

    def __post_init__(self):
        for name in ("d_model", "k_heads", "v_heads", "k_head_dim", "v_head_dim", "conv_width",
                     "chunk_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GlassformerError(f"Gated DeltaNet {name} must be an integer >= 1, "
                                       f"got {value!r}")
        if self.v_heads % self.k_heads:
            raise GlassformerError(f"linear_num_value_heads={self.v_heads} must be a multiple "
                                   f"of linear_num_key_heads={self.k_heads}")

    @property
    def key_width(self) -> int:
        return self.k_heads * self.k_head_dim

    @property
    def value_width(self) -> int:
        return self.v_heads * self.v_head_dim

    @property
    def conv_dim(self) -> int:
        """Dc, the channels of the conv1d: q, k and v side by side."""
        return 2 * self.key_width + self.value_width


class GatedDeltaCtx(NamedTuple):
    """Saved for backward (None after a forward with a state: inference only)."""
    mask: np.ndarray | None       # (B, T, 1) the padding mask applied to x, or None
    proj: dict                    # name -> LinearCtx of wq, wk, wv, wz, wb, wa
    conv: CausalConv1dCtx
    conv_act: SiluCtx
    q_norm: L2NormCtx
    k_norm: L2NormCtx
    beta: SigmoidCtx
    step: SoftplusCtx
    step_out: np.ndarray          # softplus(a + dt_bias) (B, T, Hv)
    decay_rate: np.ndarray        # exp(a_log) (Hv,)
    rule: object                  # DeltaRuleCtx or ChunkedCtx
    chunked: bool
    norm: GatedRMSNormCtx
    out: LinearCtx
    cfg: GatedDeltaConfig


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    """(B, T, n*D) -> (B, n, T, D)."""
    b, t, _ = x.shape
    return x.reshape(b, t, n, -1).transpose(0, 2, 1, 3)


def _unheads(x: np.ndarray) -> np.ndarray:
    """(B, n, T, D) -> (B, T, n*D)."""
    b, n, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, n * d)


def gated_delta_forward(params: dict, x: np.ndarray, cfg: GatedDeltaConfig, *,
                        key_mask: np.ndarray | None = None, state: LayerState | None = None
                        ) -> tuple[np.ndarray, GatedDeltaCtx | None]:
    """x (B, T, C) -> (B, T, C). key_mask (B, S) True for real tokens (its last T columns are
    this call's). state: this layer's decoding state, read and replaced (no ctx returned)."""
    check_shape("x", check_float("x", x), ("B", "T", "C"), {"C": cfg.d_model})
    b, t, _ = x.shape
    mask = None
    if key_mask is not None and not key_mask[:, -t:].all():
        mask = key_mask[:, -t:, None].astype(x.dtype)                       # (B, T, 1)
        x = x * mask
    proj = {}
    outs = {}
    for name in ("wq", "wk", "wv", "wz", "wb", "wa"):
        outs[name], proj[name] = linear_forward(x, params[name])
    mixed = np.concatenate([outs["wq"], outs["wk"], outs["wv"]], axis=-1)   # (B, T, Dc)
    (conv_out, tail), conv_ctx = causal_conv1d_forward(
        mixed, params["conv"], tail=None if state is None else state.conv)
    mixed, act_ctx = silu_forward(conv_out)
    kd = cfg.key_width
    q = _heads(mixed[..., :kd], cfg.k_heads)                                # (B, Hk, T, Dk)
    k = _heads(mixed[..., kd:2 * kd], cfg.k_heads)
    v = _heads(mixed[..., 2 * kd:], cfg.v_heads)                            # (B, Hv, T, Dv)
    q, q_norm = l2_norm_forward(q, eps=L2_EPS)
    k, k_norm = l2_norm_forward(k, eps=L2_EPS)
    group = cfg.v_heads // cfg.k_heads
    q, k = np.repeat(q, group, axis=1), np.repeat(k, group, axis=1)        # (B, Hv, T, Dk)
    beta, beta_ctx = sigmoid_forward(outs["wb"])                            # (B, T, Hv)
    step, step_ctx = softplus_forward(outs["wa"] + params["dt_bias"])       # (B, T, Hv)
    rate = np.exp(params["a_log"])                                          # (Hv,)
    g = -rate * step                                                        # (B, T, Hv)
    beta, g = beta.transpose(0, 2, 1), g.transpose(0, 2, 1)                 # (B, Hv, T)
    initial = None if state is None else state.recurrent
    chunked = not (state is not None and t == 1)
    if chunked:
        (o, last), rule_ctx = delta_rule_chunked_forward(q, k, v, g, beta, state=initial,
                                                         chunk_size=cfg.chunk_size)
    else:
        (o, last), rule_ctx = delta_rule_forward(q, k, v, g, beta, state=initial)
    z = _heads(outs["wz"], cfg.v_heads)                                     # (B, Hv, T, Dv)
    o, norm_ctx = gated_rms_norm_forward(o, z, params["norm"], eps=cfg.norm_eps)
    y, out_ctx = linear_forward(_unheads(o), params["wo"])                  # (B, T, C)
    if state is not None:
        state.conv[...] = tail
        state.recurrent[...] = last
        return y, None
    return y, GatedDeltaCtx(mask, proj, conv_ctx, act_ctx, q_norm, k_norm, beta_ctx, step_ctx,
                            step, rate, rule_ctx, chunked, norm_ctx, out_ctx, cfg)


def gated_delta_backward(dy: np.ndarray, ctx: GatedDeltaCtx | None) -> tuple[dict, np.ndarray]:
    """(grads under the forward's local names, dx)."""
    if ctx is None:
        raise GlassformerError("a Gated DeltaNet forward run with a decoding state is inference "
                               "only; run it without a state to train")
    cfg = ctx.cfg
    grads = {}
    do, grads["wo"], _ = linear_backward(dy, ctx.out)
    do, dz, grads["norm"] = gated_rms_norm_backward(_heads(do, cfg.v_heads), ctx.norm)
    step = delta_rule_chunked_backward if ctx.chunked else delta_rule_backward
    dq, dk, dv, dg, dbeta, _ = step(do, ctx.rule)
    dg, dbeta = dg.transpose(0, 2, 1), dbeta.transpose(0, 2, 1)             # (B, T, Hv)
    # g = -rate * softplus(a + dt_bias), rate = exp(a_log)
    grads["a_log"] = np.einsum("bth,bth->h", dg, ctx.step_out) * -ctx.decay_rate
    dpre = softplus_backward(dg * -ctx.decay_rate, ctx.step)                # (B, T, Hv)
    grads["dt_bias"] = dpre.sum(axis=(0, 1))
    outs = {"wz": _unheads(dz), "wb": sigmoid_backward(dbeta, ctx.beta), "wa": dpre}
    b, hv = dq.shape[:2]
    group = hv // cfg.k_heads
    dq = dq.reshape(b, cfg.k_heads, group, *dq.shape[2:]).sum(axis=2)       # fan-out: repeat
    dk = dk.reshape(b, cfg.k_heads, group, *dk.shape[2:]).sum(axis=2)       # (B, Hk, T, Dk)
    dq = l2_norm_backward(dq, ctx.q_norm)
    dk = l2_norm_backward(dk, ctx.k_norm)
    dmixed = np.concatenate([_unheads(dq), _unheads(dk), _unheads(dv)], axis=-1)
    dconv = silu_backward(dmixed, ctx.conv_act)
    dmixed, grads["conv"], _ = causal_conv1d_backward(dconv, ctx.conv)
    kd = cfg.key_width
    outs.update(wq=dmixed[..., :kd], wk=dmixed[..., kd:2 * kd], wv=dmixed[..., 2 * kd:])
    dx = None
    for name in ("wq", "wk", "wv", "wz", "wb", "wa"):
        dx_part, grads[name], _ = linear_backward(outs[name], ctx.proj[name])
        dx = dx_part if dx is None else dx + dx_part        # fan-out: x feeds six projections
    if ctx.mask is not None:
        dx = dx * ctx.mask
    return grads, dx


def gated_delta_shapes(cfg: GatedDeltaConfig) -> dict[str, tuple[int, ...]]:
    """Block-local names and shapes, in init's order."""
    c, kd, vd, hv = cfg.d_model, cfg.key_width, cfg.value_width, cfg.v_heads
    return {"wq": (c, kd), "wk": (c, kd), "wv": (c, vd), "wz": (c, vd), "wb": (c, hv),
            "wa": (c, hv), "conv": (cfg.conv_dim, cfg.conv_width), "dt_bias": (hv,),
            "a_log": (hv,), "norm": (cfg.v_head_dim,), "wo": (vd, c)}


def init_gated_delta(cfg: GatedDeltaConfig, rng: np.random.Generator, *, std: float,
                     out_std: float, dtype=np.float32) -> dict:
    """Normal(0, std) projections and conv taps, wo at out_std; dt_bias 1, a_log = log of
    Uniform(0.01, 16) (transformers' init), norm 1."""
    params = {}
    for name, shape in gated_delta_shapes(cfg).items():
        if name == "dt_bias":
            params[name] = np.ones(shape, dtype)
        elif name == "a_log":
            params[name] = np.log(rng.uniform(0.01, 16.0, shape)).astype(dtype)
        elif name == "norm":
            params[name] = np.ones(shape, dtype)
        else:
            scale = out_std if name == "wo" else std
            params[name] = (rng.standard_normal(shape) * scale).astype(dtype)
    return params
