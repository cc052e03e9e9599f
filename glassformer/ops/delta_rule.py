"""The gated delta rule in its recurrent form: one token at a time, a (Dk, Dv) state per head.

Gated DeltaNet (Yang et al. 2024) keeps, per head, a matrix S that maps keys to values. Each
token first decays it, then writes the *correction* v - S^T k (the delta rule), then reads it:

    P_t = exp(g_t) S_{t-1}                      g_t <= 0: the gate, a decay in log space
    d_t = beta_t (v_t - P_t^T k_t)              beta_t in (0, 1): how much of the error to write
    S_t = P_t + k_t d_t^T                       (Dk, Dv)
    o_t = S_t^T (q_t / sqrt(Dk))                (Dv,)

q, k, v (B, H, T, Dk|Dv), g, beta (B, H, T), state (B, H, Dk, Dv) or None (zeros). Returns the
outputs (B, H, T, Dv) and the last state. This is transformers' `torch_recurrent_gated_delta_rule`
after its l2 norm (the block normalises q and k first, `ops/l2_norm.py`) and its head repeat
(the block repeats k heads for grouped value heads). `ops/delta_rule_chunked.py` computes the
same numbers a chunk at a time; a test holds them equal.

Backward walks the tokens in reverse with G, the gradient reaching S_t (the final state's
gradient to start, or zeros):

    G     += qs_t do_t^T ;  dqs_t = S_t do_t
    dk_t   = G d_t ;  dd = G^T k_t
    dbeta_t = dd . (v_t - m_t) ;  dv_t = beta_t dd ;  dm = -beta_t dd      (m_t = P_t^T k_t)
    dP     = G + k_t dm^T ;  dk_t += P_t dm
    dg_t   = exp(g_t) sum(dP * S_{t-1}) ;  G = exp(g_t) dP                  (to S_{t-1})

ctx keeps every state S_0..S_T (T+1 of (Dk, Dv) per head): decoding calls it with T = 1, and
training uses the chunked form, which keeps one state per chunk.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float, check_same_dtype, check_shape


class DeltaRuleCtx(NamedTuple):
    """Saved for backward: the inputs (q already scaled) and the states before and after each token.

    qs, k, v: (B, H, T, Dk), (B, H, T, Dk), (B, H, T, Dv); qs = q / sqrt(Dk).
    decay:    exp(g) (B, H, T).
    beta:     (B, H, T).
    states:   (B, H, T+1, Dk, Dv): states[:, :, t] is S_t, states[:, :, 0] the initial one.
    scale:    1 / sqrt(Dk).
    had_state: whether an initial state was given (else its gradient is None).
    """
    qs: np.ndarray
    k: np.ndarray
    v: np.ndarray
    decay: np.ndarray
    beta: np.ndarray
    states: np.ndarray
    scale: float
    had_state: bool


def check_delta_inputs(q, k, v, g, beta, state) -> dict:
    """Checks the shared inputs of both forms; returns the bound sizes."""
    for name, arr in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        check_float(name, arr)
    sizes: dict = {}
    check_shape("q", q, ("B", "H", "T", "Dk"), sizes)
    check_shape("k", k, ("B", "H", "T", "Dk"), sizes)
    check_shape("v", v, ("B", "H", "T", "Dv"), sizes)
    check_shape("g", g, ("B", "H", "T"), sizes)
    check_shape("beta", beta, ("B", "H", "T"), sizes)
    check_same_dtype(q=q, k=k, v=v, g=g, beta=beta)
    if state is not None:
        check_float("state", state)
        check_shape("state", state, ("B", "H", "Dk", "Dv"), sizes)
        check_same_dtype(q=q, state=state)
    return sizes


def delta_rule_forward(q, k, v, g, beta, *, state=None):
    """((o (B, H, T, Dv), last state (B, H, Dk, Dv)), ctx), one token after another.

    >>> one = np.ones((1, 1, 1, 1))
    >>> (o, s), _ = delta_rule_forward(one, one, 2 * one, np.zeros((1, 1, 1)), np.ones((1, 1, 1)))
    >>> o.ravel().tolist(), s.ravel().tolist()
    ([2.0], [2.0])
    """
    check_delta_inputs(q, k, v, g, beta, state)
    n_b, n_h, steps, d_k = q.shape
    d_v = v.shape[-1]
    scale = float(d_k) ** -0.5
    qs = q * scale                                          # (B, H, T, Dk)
    decay = np.exp(g)                                       # (B, H, T)
    states = np.empty((n_b, n_h, steps + 1, d_k, d_v), dtype=q.dtype)
    states[:, :, 0] = 0.0 if state is None else state
    out = np.empty((n_b, n_h, steps, d_v), dtype=q.dtype)
    for t in range(steps):
        p = states[:, :, t] * decay[:, :, t, None, None]    # (B, H, Dk, Dv)
        k_t = k[:, :, t]                                    # (B, H, Dk)
        m = np.einsum("bhkv,bhk->bhv", p, k_t)              # what S already says for k_t
        d = beta[:, :, t, None] * (v[:, :, t] - m)          # (B, H, Dv)
        states[:, :, t + 1] = p + k_t[..., None] * d[..., None, :]
        out[:, :, t] = np.einsum("bhkv,bhk->bhv", states[:, :, t + 1], qs[:, :, t])
    ctx = DeltaRuleCtx(qs=qs, k=k, v=v, decay=decay, beta=beta, states=states, scale=scale,
                       had_state=state is not None)
    return (out, states[:, :, steps].copy()), ctx


def delta_rule_backward(dout, ctx: DeltaRuleCtx, *, dstate=None):
    """(dq, dk, dv, dg, dbeta, dstate0); dstate is the last state's gradient (None: zeros)."""
    states, k, v, decay, beta = ctx.states, ctx.k, ctx.v, ctx.decay, ctx.beta
    steps = k.shape[2]
    grad = np.zeros_like(states[:, :, 0]) if dstate is None else dstate.copy()  # G at S_T
    dqs, dk, dv = np.empty_like(ctx.qs), np.empty_like(k), np.empty_like(v)
    dg, dbeta = np.empty_like(decay), np.empty_like(beta)
    for t in reversed(range(steps)):
        s_prev, s_t = states[:, :, t], states[:, :, t + 1]
        k_t, do_t = k[:, :, t], dout[:, :, t]
        grad += ctx.qs[:, :, t, :, None] * do_t[..., None, :]        # o_t = S_t^T qs_t
        dqs[:, :, t] = np.einsum("bhkv,bhv->bhk", s_t, do_t)
        p = s_prev * decay[:, :, t, None, None]                      # recomputed: one product
        m = np.einsum("bhkv,bhk->bhv", p, k_t)
        err = v[:, :, t] - m                                         # (B, H, Dv)
        d = beta[:, :, t, None] * err
        dk_t = np.einsum("bhkv,bhv->bhk", grad, d)                   # S_t = P + k d^T
        dd = np.einsum("bhkv,bhk->bhv", grad, k_t)
        dbeta[:, :, t] = np.einsum("bhv,bhv->bh", dd, err)
        dv[:, :, t] = beta[:, :, t, None] * dd
        dm = -dv[:, :, t]
        dp = grad + k_t[..., None] * dm[..., None, :]                # fan-out: P feeds S_t and m
        dk_t += np.einsum("bhkv,bhv->bhk", p, dm)
        dk[:, :, t] = dk_t
        dg[:, :, t] = decay[:, :, t] * np.einsum("bhkv,bhkv->bh", dp, s_prev)
        grad = dp * decay[:, :, t, None, None]
    dq = dqs * ctx.scale
    return dq, dk, dv, dg, dbeta, (grad if ctx.had_state else None)
