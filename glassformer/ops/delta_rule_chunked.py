"""The gated delta rule a chunk at a time (prefill and training): the same numbers as the
recurrent form (`ops/delta_rule.py`), with the T steps inside a chunk done as a few matrix products.

The sequence is padded with zeros to a multiple of the chunk size Cs (64, as transformers'
`torch_chunk_gated_delta_rule`; a padded token has beta = 0 and g = 0, so it changes nothing) and
cut into N chunks. Inside one chunk, with gamma = cumsum(g) and S the state before the chunk:

    Gam[i, j] = exp(gamma_i - gamma_j) for j <= i, else 0     the decay from token j to token i
    A   = strict_lower((beta k) k^T * Gam)          how token j's write changes token i's error
    Tm  = I + A                                               unit lower triangular
    U   = Tm^-1 (beta v) ;  W = Tm^-1 (beta k exp(gamma))     (Tm^-1: forward substitution)
    Vn  = U - W S                                             each token's write d_i, all at once
    O   = (q exp(gamma)) S + (q k^T * Gam) Vn       the old state read, plus this chunk's writes
    S'  = exp(gamma_last) S + (k exp(gamma_last - gamma))^T Vn

Why it equals the recurrence: unrolled, d_i = beta_i (v_i - exp(gamma_i) S^T k_i
- sum_{j<i} Gam[i, j] (k_i . k_j) d_j), a lower-triangular system (I + A) d = beta v - (beta k
exp(gamma)) S, whose solution is Vn; O and S' are the recurrence's sums over j <= i, with the decays
collected in Gam. Only the chunk-to-chunk scan over S is sequential.

Backward: the scan in reverse gives each chunk's dVn (from dO and the gradient dS' of the state
after it) and the gradient of the state before it; then every chunk at once, through the products
above, the triangular solve (dX = Tm^-T dU, dA = -strict_lower(dX U^T) for each of U and W), the
elementwise decays (dGam * Gam goes to gamma_i with +, to gamma_j with -) and the cumsum (dg = a
reversed cumsum of dgamma). docs/derivations/delta_rule.md writes it out.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.delta_rule import check_delta_inputs

CHUNK = 64  # transformers' default chunk_size


class ChunkedCtx(NamedTuple):
    """Saved for backward, all chunked as (B, H, N, Cs, ...) (qs = q / sqrt(Dk)).

    qs, k, v, beta, gamma: the padded inputs and gamma = cumsum(g) within each chunk.
    gam:    Gam (B, H, N, Cs, Cs), the masked decays.
    tinv:   Tm^-1 (B, H, N, Cs, Cs).
    u, w:   U and W.
    vn:     Vn, each token's write.
    states: (B, H, N+1, Dk, Dv), the state before each chunk and after the last.
    steps, scale, had_state: T before padding, 1 / sqrt(Dk), whether a state was given.
    """
    qs: np.ndarray
    k: np.ndarray
    v: np.ndarray
    beta: np.ndarray
    gamma: np.ndarray
    gam: np.ndarray
    tinv: np.ndarray
    u: np.ndarray
    w: np.ndarray
    vn: np.ndarray
    states: np.ndarray
    steps: int
    scale: float
    had_state: bool


def unit_lower_inverse(a: np.ndarray) -> np.ndarray:
    """(I + A)^-1 for a strictly lower A (..., n, n), by forward substitution row by row:
    row i of the inverse is e_i - sum_{j<i} A[i, j] (row j of the inverse)."""
    n = a.shape[-1]
    inv = np.zeros_like(a)
    for i in range(n):
        inv[..., i, i] = 1.0
        inv[..., i, :i] -= np.einsum("...j,...jc->...c", a[..., i, :i], inv[..., :i, :i])
    return inv


def _chunks(x: np.ndarray, steps_padded: int, size: int) -> np.ndarray:
    """(B, H, T, ...) -> zero-padded to T' and reshaped (B, H, N, Cs, ...)."""
    pad = [(0, 0)] * x.ndim
    pad[2] = (0, steps_padded - x.shape[2])
    x = np.pad(x, pad)
    return x.reshape(x.shape[:2] + (steps_padded // size, size) + x.shape[3:])


def delta_rule_chunked_forward(q, k, v, g, beta, *, state=None, chunk_size: int = CHUNK):
    """((o (B, H, T, Dv), last state (B, H, Dk, Dv)), ctx), Cs tokens per matrix product."""
    check_delta_inputs(q, k, v, g, beta, state)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise GlassformerError(f"expected chunk_size to be a whole number >= 1, got {chunk_size!r}")
    n_b, n_h, steps, d_k = q.shape
    d_v = v.shape[-1]
    scale = float(d_k) ** -0.5
    padded = -(-steps // chunk_size) * chunk_size
    qs, kc, vc = (_chunks(x, padded, chunk_size) for x in (q * scale, k, v))  # (B, H, N, Cs, D)
    bc, gc = _chunks(beta, padded, chunk_size), _chunks(g, padded, chunk_size)  # (B, H, N, Cs)
    gamma = np.cumsum(gc, axis=-1)
    diff = gamma[..., :, None] - gamma[..., None, :]                  # (B, H, N, Cs, Cs)
    lower = np.tril(np.ones((chunk_size, chunk_size), dtype=bool))
    gam = np.where(lower, np.exp(np.where(lower, diff, 0.0)), 0.0)    # no exp of a positive diff
    kb = kc * bc[..., None]
    a = np.tril(kb @ np.swapaxes(kc, -1, -2) * gam, -1)                # strict lower
    tinv = unit_lower_inverse(a)
    u = tinv @ (vc * bc[..., None])                                   # (B, H, N, Cs, Dv)
    w = tinv @ (kb * np.exp(gamma)[..., None])                        # (B, H, N, Cs, Dk)
    m = (qs @ np.swapaxes(kc, -1, -2)) * gam                          # (B, H, N, Cs, Cs)
    qd = qs * np.exp(gamma)[..., None]
    kd = kc * np.exp(gamma[..., -1:] - gamma)[..., None]
    n_chunks = padded // chunk_size
    states = np.empty((n_b, n_h, n_chunks + 1, d_k, d_v), dtype=q.dtype)
    states[:, :, 0] = 0.0 if state is None else state
    vn = np.empty_like(u)
    out = np.empty((n_b, n_h, n_chunks, chunk_size, d_v), dtype=q.dtype)
    for n in range(n_chunks):                                         # the only sequential part
        s = states[:, :, n]
        vn[:, :, n] = u[:, :, n] - w[:, :, n] @ s
        out[:, :, n] = qd[:, :, n] @ s + m[:, :, n] @ vn[:, :, n]
        states[:, :, n + 1] = (np.exp(gamma[:, :, n, -1])[..., None, None] * s
                               + np.swapaxes(kd[:, :, n], -1, -2) @ vn[:, :, n])
    out = out.reshape(n_b, n_h, padded, d_v)[:, :, :steps]
    ctx = ChunkedCtx(qs=qs, k=kc, v=vc, beta=bc, gamma=gamma, gam=gam, tinv=tinv, u=u, w=w,
                     vn=vn, states=states, steps=steps, scale=scale, had_state=state is not None)
    return (out, states[:, :, n_chunks].copy()), ctx


def _t(x):
    return np.swapaxes(x, -1, -2)


def delta_rule_chunked_backward(dout, ctx: ChunkedCtx, *, dstate=None):
    """(dq, dk, dv, dg, dbeta, dstate0), as `delta_rule_backward`."""
    qs, kc, vc, bc, gamma, gam = ctx.qs, ctx.k, ctx.v, ctx.beta, ctx.gamma, ctx.gam
    n_b, n_h, n_chunks, size, _ = qs.shape
    do = _chunks(dout, n_chunks * size, size)                          # (B, H, N, Cs, Dv)
    states = ctx.states
    e_gamma = np.exp(gamma)                                            # (B, H, N, Cs)
    e_last = e_gamma[..., -1]                                          # (B, H, N)
    e_rest = np.exp(gamma[..., -1:] - gamma)                           # (B, H, N, Cs)
    m = (qs @ _t(kc)) * gam
    qd, kd = qs * e_gamma[..., None], kc * e_rest[..., None]
    # the scan in reverse: dS_after[n] is the gradient of the state after chunk n
    ds_after = np.empty_like(states[:, :, 1:])
    dvn = np.empty_like(ctx.vn)
    grad = np.zeros_like(states[:, :, 0]) if dstate is None else dstate.copy()
    for n in reversed(range(n_chunks)):
        ds_after[:, :, n] = grad
        dvn[:, :, n] = _t(m[:, :, n]) @ do[:, :, n] + kd[:, :, n] @ grad
        grad = (e_last[:, :, n, None, None] * grad + _t(qd[:, :, n]) @ do[:, :, n]
                - _t(ctx.w[:, :, n]) @ dvn[:, :, n])
    s_before = states[:, :, :-1]                                       # (B, H, N, Dk, Dv)
    # every chunk at once
    dkd = ctx.vn @ _t(ds_after)                                        # (B, H, N, Cs, Dk)
    de_last = np.einsum("bhnkv,bhnkv->bhn", ds_after, s_before)
    dw = -dvn @ _t(s_before)                                           # Vn = U - W S
    dqd = do @ _t(s_before)                                            # O = Qd S + M Vn
    dm = do @ _t(ctx.vn)
    du = dvn
    dvb = _t(ctx.tinv) @ du                                            # U = Tm^-1 Vb
    dx = _t(ctx.tinv) @ dw                                             # W = Tm^-1 X
    da = np.tril(-(dvb @ _t(ctx.u)) - dx @ _t(ctx.w), -1)
    kb = kc * bc[..., None]
    kbkt, qkt = kb @ _t(kc), qs @ _t(kc)
    da_prod = da * gam                                                 # A = (Kb K^T) * Gam
    dkb = da_prod @ kc
    dk = _t(da_prod) @ kb
    dm_prod = dm * gam                                                 # M = (Q K^T) * Gam
    dqs = dm_prod @ kc + dqd * e_gamma[..., None]
    dk += _t(dm_prod) @ qs
    dgam = np.tril(da, -1) * kbkt + dm * qkt                          # Gam's entries are lower only
    egam = np.tril(dgam * gam)
    dgamma = egam.sum(-1) - egam.sum(-2)                               # exp(gamma_i - gamma_j)
    dgamma += np.einsum("bhncd,bhncd->bhnc", dqd, qd)
    x = kb * e_gamma[..., None]
    dkb += dx * e_gamma[..., None]
    dgamma += np.einsum("bhncd,bhncd->bhnc", dx, x)
    dk += dkd * e_rest[..., None]
    r = np.einsum("bhncd,bhncd->bhnc", dkd, kd)                        # exp(gamma_last - gamma)
    dgamma -= r
    dgamma[..., -1] += r.sum(-1) + de_last * e_last
    dk += dkb * bc[..., None]
    dbeta = np.einsum("bhncd,bhncd->bhnc", dkb, kc) + np.einsum("bhncd,bhncd->bhnc", dvb, vc)
    dv = dvb * bc[..., None]
    dg = np.flip(np.cumsum(np.flip(dgamma, -1), -1), -1)               # gamma = cumsum(g)

    def unchunk(x):
        return x.reshape((n_b, n_h, n_chunks * size) + x.shape[4:])[:, :, :ctx.steps]

    dq = unchunk(dqs) * ctx.scale
    return (dq, unchunk(dk), unchunk(dv), unchunk(dg), unchunk(dbeta),
            grad if ctx.had_state else None)
