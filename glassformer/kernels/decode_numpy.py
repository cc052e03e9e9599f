"""The decode kernels written with the ops: the reference each compiled kernel must equal.

A decoded step feeds one token per row, so every activation here is (B, width): B rows (a batch
of prompts, or serve's running rows), one position each. blocks/decode_step.py runs a layer as

    h, xn  = add_norm_rows(x, a, bo, norm2)         residual after attention, then the MLP's norm
    hidden = swiglu_rows(gate, up)  or  gelu_rows(up, b_up, approximate)
    x, xn  = add_norm_rows(h, m, b_down, next norm1) residual after the MLP, the next layer's norm
    x, xn  = swiglu_down_norm_rows(gate, up, W_down^T, b_down, h, next norm1)
                                                    the three lines above, the down product in
    out    = attend_step(q, k, v, ...)               RoPE, cache write, attention over the cache
    x, xn  = layer_step(x, xn, qkv, ..., w_down, ..., next norm1)
                                                    one row's whole layer, its products included

with BLAS products between them (xn @ [wq | wk | wv], out @ wo, ...). Each function below is the
same math as the layer's own path through the ops (ops/rms_norm.py, ops/layer_norm.py,
ops/rope.py, ops/attention.py, ops/swiglu.py, ops/activation.py), called on these shapes; it is
what kernels/decode_numba.py is tested against (tests/kernels/). An absent bias or RoPE table is
None, as in the compiled twins.
"""
from __future__ import annotations

import numpy as np

from glassformer.ops.activation import gelu_forward
from glassformer.ops.attention import attention_forward
from glassformer.ops.layer_norm import layer_norm_forward
from glassformer.ops.rms_norm import rms_norm_forward
from glassformer.ops.rope import rope_forward
from glassformer.ops.swiglu import swiglu_forward


def norm_rows(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float, rms: bool
              ) -> np.ndarray:
    """RMSNorm (rms, no b) or LayerNorm of each row: x (B, C) -> (B, C)."""
    if rms:
        return rms_norm_forward(x, w, eps=eps)[0]
    return layer_norm_forward(x, w, b, eps=eps)[0]


def add_norm_rows(x: np.ndarray, delta: np.ndarray, bias: np.ndarray | None,
                  w: np.ndarray | None, b: np.ndarray | None, eps: float, rms: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The residual sum and the next norm: h = x + (delta + bias), and norm(h). (B, C) each.
    bias: the sub-block's output bias (bo, b_down), added to its output before the sum.
    w None (the last layer: the head's norm comes next): the norm is (B, 0)."""
    if bias is not None:
        delta = delta + bias                       # the projection's own output, as linear adds it
    h = x + delta                                  # (B, C)
    if w is None:
        return h, np.empty((h.shape[0], 0), h.dtype)
    return h, norm_rows(h, w, b, eps, rms)


def swiglu_rows(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate) * up: (B, F), (B, F) -> (B, F)."""
    return swiglu_forward(gate, up)[0]


def swiglu_down_norm_rows(gate: np.ndarray, up: np.ndarray, down_t: np.ndarray,
                          bias: np.ndarray | None, h: np.ndarray, w: np.ndarray | None,
                          b: np.ndarray | None, eps: float, rms: bool
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The MLP's end and the next norm, its down product included: hidden = silu(gate) * up
    (B, F), m = hidden @ W_down, x = h + (m + bias), and norm(x) with the next layer's w, b
    ((B, 0) when w is None: the last layer, whose norm the head makes). down_t: W_down^T (C, F),
    the (out, in) layout a checkpoint loads. Returns (x, norm(x))."""
    m = swiglu_rows(gate, up) @ down_t.T                        # (B, F) @ (F, C) -> (B, C)
    return add_norm_rows(h, m, bias, w, b, eps, rms)


def gelu_rows(up: np.ndarray, bias: np.ndarray | None, approximate: bool) -> np.ndarray:
    """GELU(up + bias), exact (erf) or GPT-2's tanh form: (B, F) -> (B, F)."""
    if bias is not None:
        up = up + bias                             # (B, F) + (F,)
    mode = "tanh" if approximate else "none"
    return gelu_forward(up, approximate=mode, keep_slope=False)[0]


def _heads(lin: np.ndarray, bias: np.ndarray | None, heads: int) -> np.ndarray:
    """(B, n D) projection (+ bias) -> (B, n, 1, D) heads of one position."""
    if bias is not None:
        lin = lin + bias
    return lin.reshape(lin.shape[0], heads, 1, -1)                 # (B, n*D) -> (B, n, 1, D)


def attend_step(q: np.ndarray, k: np.ndarray, v: np.ndarray, bq: np.ndarray | None,
                bk: np.ndarray | None, bv: np.ndarray | None, cos: np.ndarray | None,
                sin: np.ndarray | None, k_cache: np.ndarray, v_cache: np.ndarray, length: int,
                key_mask: np.ndarray | None) -> np.ndarray:
    """One position's attention over a KV cache, for every row and head.

    q (B, H*D), k and v (B, K*D): this step's projections (+ bq, bk, bv). cos, sin (B, D): RoPE
    tables at each row's position (None: no RoPE). k_cache, v_cache (B, K, T_max, D): the new key
    and value are written at column `length`, then the query attends to columns [0, length]
    (key_mask (B, length + 1) False for keys a row must not see). Query head h reads KV head
    h // G (G = H / K). Returns the heads' outputs merged, (B, H*D).
    """
    n_kv, d = k_cache.shape[1], k_cache.shape[3]
    n_head = q.shape[1] // d
    b = q.shape[0]
    q_heads = _heads(q, bq, n_head)                                # (B, H, 1, D)
    k_heads = _heads(k, bk, n_kv)                                  # (B, K, 1, D)
    if cos is not None:
        table_cos, table_sin = cos[:, None, None], sin[:, None, None]   # (B, D) -> (B, 1, 1, D)
        q_heads = rope_forward(q_heads, table_cos, table_sin)[0]
        k_heads = rope_forward(k_heads, table_cos, table_sin)[0]
    k_cache[:, :, length] = k_heads[:, :, 0]                       # (B, K, D) at column length
    v_cache[:, :, length] = _heads(v, bv, n_kv)[:, :, 0]
    grouped = q_heads.reshape(b, n_kv, n_head // n_kv, 1, d)       # (B, K, G, 1, D)
    out = np.zeros_like(grouped)
    for row in range(b):
        # note: each row over its own keys, gathered: the shapes of its products and sums are
        # then its own key count's, whatever the other rows and wherever its keys sit in the
        # cache (serve --batch-invariant); one masked batch would sum zeros at other places
        cols = (np.arange(length + 1) if key_mask is None
                else np.flatnonzero(key_mask[row, :length + 1]))       # (S_r,)
        if cols.size == 0:
            continue                                               # no key: zeros, as ops/ gives
        keys = k_cache[row][:, cols][None, :, None]                # (1, K, 1, S_r, D)
        values = v_cache[row][:, cols][None, :, None]
        out[row:row + 1], _ = attention_forward(grouped[row:row + 1], keys, values,
                                                keep_weights=False)
    return out.reshape(b, n_head * d)                              # (B, K, G, 1, D) -> (B, H*D)


def layer_step(x: np.ndarray, xn: np.ndarray, qkv: np.ndarray, width_q: int, width_kv: int,
               bq, bk, bv, cos, sin, k_cache: np.ndarray, v_cache: np.ndarray, length: int,
               key_mask, wo: np.ndarray, bo, norm2_w: np.ndarray, norm2_b, up: np.ndarray,
               b_up, mlp: int, w_down: np.ndarray, b_down, own_down: bool, next_w, next_b,
               eps: float, rms: bool) -> tuple[np.ndarray, np.ndarray]:
    """A whole pre-norm layer for decoded rows, its products included: x (B, C) and xn =
    norm1(x) -> the layer's output and the next layer's norm1 of it ((B, 0) when next_w is None),
    the cache written at column `length` (blocks/decode_step.py's lines, one function).
    qkv (C, (H + 2K) D): q | k | v packed, width_q = H D, width_kv = K D. up: gate | up packed
    (C, 2F) when mlp is 0 (SwiGLU), else w_up (C, F) and GELU (1: exact, 2: tanh) of u + b_up.
    w_down (F, C). own_down says where the compiled twin makes the down product (no math)."""
    both = xn @ qkv                                               # (B, (H + 2K) D)
    q, k, v = (both[:, :width_q], both[:, width_q:width_q + width_kv],
               both[:, width_q + width_kv:])
    out = attend_step(q, k, v, bq, bk, bv, cos, sin, k_cache, v_cache, length, key_mask)
    h, hn = add_norm_rows(x, out @ wo, bo, norm2_w, norm2_b, eps, rms)   # (B, C) each
    lifted = hn @ up                                              # (B, 2F) or (B, F)
    if mlp == 0:
        width = lifted.shape[1] // 2
        hidden = swiglu_rows(lifted[:, :width], lifted[:, width:])
    else:
        hidden = gelu_rows(lifted, b_up, mlp == 2)
    return add_norm_rows(h, hidden @ w_down, b_down, next_w, next_b, eps, rms)
