"""LoRA (Hu et al. 2021): a frozen linear layer plus a trained low-rank update.

    y = x W + b  +  s · (dropout(x) A) B         s = alpha / r   (rsLoRA: alpha / sqrt(r))

    x (..., C_in)   W (C_in, C_out) frozen   A (C_in, r)   B (r, C_out)   y (..., C_out)

Layout. glassformer keeps every weight (in, out), so A and B are stored (C_in, r) and (r, C_out);
PEFT's files hold them as torch does, lora_A.weight (r, C_in) = A^T and lora_B.weight
(C_out, r) = B^T (io/peft.py transposes once, on load and save). In PEFT's notation the same line
reads y = x W^T + (dropout(x) A^T) B^T · s.

Init (PEFT's default): A uniform in ±1/sqrt(C_in) (kaiming_uniform with a = sqrt(5) on an (r, C_in)
matrix gives exactly that bound), B zeros, so a fresh adapter changes nothing: y = x W + b.

Backward, with g = s · dy (..., C_out) and u = dropout(x) (..., C_in), h = u A (..., r):

    dB = h^T g                   (r, N) @ (N, C_out) -> (r, C_out)
    dh = g B^T                   (N, C_out) @ (C_out, r) -> (N, r)
    dA = u^T dh                  (C_in, N) @ (N, r) -> (C_in, r)
    dx = dy W^T + dropout_backward(dh A^T)       the two paths x feeds (fan-out)

The base weight is frozen: no dW and no db are computed or stored. Its linear runs with
`frozen=True` (ops/linear.py), whose ctx keeps W but not x, and whose backward is one product,
dx = dy W^T; only the adapter keeps its inputs (u and h, r columns wide). So a LoRA step spends
one product per frozen layer on the way back instead of two, and the optimizer holds moments for
A and B only.

Dropout (PEFT's lora_dropout) acts on the adapter's copy of x only, never on the base path; with
p = 0 or in eval mode u is x itself and no random numbers are drawn.

Merging folds the update into the weight for inference: W' = W + s · A B (C_in, C_out), exactly
PEFT's merge (it adds s · B_peft A_peft = (s · A B)^T to its (out, in) weight); unmerging
subtracts the same product. Derivation: docs/derivations/lora.md.

Matches peft's `LoraLayer` on `torch.nn.Linear` (peft 0.x: `lora_B(lora_A(dropout(x))) * scaling`
added to the base output).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float, check_same_dtype, check_shape, check_weight
from glassformer.ops.dropout import DropoutCtx, dropout_backward, dropout_forward
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward


class LoraCtx(NamedTuple):
    """Saved for the adapter's backward: what dA and dB multiply by, and the two factors."""
    drop: DropoutCtx    # the dropout mask on the adapter's input (keep=None: identity)
    u: np.ndarray       # dropout(x) (..., C_in), for dA; x itself when no dropout ran
    h: np.ndarray       # u A (N, r), for dB; r is small, so this costs little
    a: np.ndarray       # A (C_in, r), for dx
    b: np.ndarray       # B (r, C_out), for dh
    scale: float        # s, a Python float so float32 stays float32


class LoraLinearCtx(NamedTuple):
    """The whole adapted layer: the frozen base linear and the adapter."""
    base: LinearCtx     # frozen: holds W (for dx) and not x
    adapter: LoraCtx


def lora_scale(alpha: float, r: int, *, rslora: bool = False) -> float:
    """s = alpha / r, or alpha / sqrt(r) with rsLoRA (Kalajdzievski 2023), as PEFT computes it.

    >>> lora_scale(16, 8), lora_scale(16, 4, rslora=True)
    (2.0, 8.0)
    """
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise GlassformerError(f"LoRA rank r must be a positive integer, got {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise GlassformerError(f"LoRA alpha must be a finite number, got {alpha!r}")
    return float(alpha) / (math.sqrt(r) if rslora else float(r))


def init_lora(c_in: int, c_out: int, r: int, rng: np.random.Generator,
              dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """A fresh adapter (A (C_in, r) uniform in ±1/sqrt(C_in), B (r, C_out) zeros): B A = 0, so the
    layer starts as the base layer. Draws A only."""
    bound = 1.0 / math.sqrt(c_in)
    a = rng.uniform(-bound, bound, size=(c_in, r)).astype(dtype)             # (C_in, r)
    b = np.zeros((r, c_out), dtype)                                          # (r, C_out)
    return a, b


def lora_delta_forward(x: np.ndarray, a: np.ndarray, b: np.ndarray, *, scale: float,
                       dropout: float = 0.0, train: bool = False,
                       rng: np.random.Generator | None = None) -> tuple[np.ndarray, LoraCtx]:
    """The adapter's path alone: delta = s · (dropout(x) A) B. x (..., C_in) -> (..., C_out).

    A block whose base product covers several layers at once (attention's joined q|k|v product)
    adds this to its slice of the output; lora_forward adds it to one base linear.

    >>> delta, _ = lora_delta_forward(np.ones((2, 3)), np.ones((3, 1)), np.ones((1, 4)), scale=0.5)
    >>> delta.tolist()[0]
    [1.5, 1.5, 1.5, 1.5]
    """
    check_float("x", x)
    check_float("A", a)
    check_float("B", b)
    sizes: dict = {}
    check_shape("A", a, ("C_in", "r"), sizes)
    check_shape("B", b, ("r", "C_out"), sizes)
    check_shape("x", x, ("...", "C_in"), sizes)
    check_same_dtype(x=x, A=a, B=b)
    u, drop_ctx = dropout_forward(x, p=dropout, rng=rng, train=train)       # (..., C_in)
    rows = u.reshape(-1, sizes["C_in"])                                      # -> (N, C_in)
    h = rows @ a                                  # (N, C_in) @ (C_in, r) -> (N, r)
    delta = (h @ b) * float(scale)                # (N, r) @ (r, C_out) -> (N, C_out)
    delta = delta.reshape(x.shape[:-1] + (sizes["C_out"],))                  # -> (..., C_out)
    return delta, LoraCtx(drop=drop_ctx, u=u, h=h, a=a, b=b, scale=float(scale))


def lora_delta_backward(ddelta: np.ndarray, ctx: LoraCtx
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dx, dA, dB) of the adapter's path; dx is this path's share only."""
    c_in, r = ctx.a.shape
    c_out = ctx.b.shape[1]
    g = ddelta.reshape(-1, c_out) * ctx.scale       # (..., C_out) -> (N, C_out), s folded in once
    db = ctx.h.T @ g                                # (r, N) @ (N, C_out) -> (r, C_out)
    dh = g @ ctx.b.T                                # (N, C_out) @ (C_out, r) -> (N, r)
    da = ctx.u.reshape(-1, c_in).T @ dh             # (C_in, N) @ (N, r) -> (C_in, r)
    du = (dh @ ctx.a.T).reshape(ctx.u.shape)        # (N, r) @ (r, C_in) -> (..., C_in)
    dx = dropout_backward(du, ctx.drop)             # through the adapter's own dropout mask
    return dx, da, db


def lora_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, a: np.ndarray,
                 b: np.ndarray, *, scale: float, dropout: float = 0.0, train: bool = False,
                 rng: np.random.Generator | None = None) -> tuple[np.ndarray, LoraLinearCtx]:
    """y = x W + bias + s · (dropout(x) A) B, with W and bias frozen.

    x (..., C_in), w (C_in, C_out), bias (C_out,) or None, a (C_in, r), b (r, C_out)
    -> y (..., C_out). ctx: the frozen base linear's (W only) and the adapter's (u, h, A, B, s).

    >>> rng = np.random.default_rng(0)
    >>> x, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    >>> a, b = init_lora(3, 4, 2, rng, dtype=np.float64)
    >>> y, _ = lora_forward(x, w, None, a, b, scale=2.0)
    >>> bool(np.allclose(y, x @ w))     # B starts at zero: the base layer's output
    True
    """
    check_weight("w", w)   # the frozen base may be quantized (QLoRA)
    check_shape("w", w, ("C_in", "C_out"), {"C_in": a.shape[0], "C_out": b.shape[-1]})
    delta, adapter = lora_delta_forward(x, a, b, scale=scale, dropout=dropout, train=train,
                                        rng=rng)                             # (..., C_out)
    y, base = linear_forward(x, w, bias, frozen=True)                        # (..., C_out)
    y += delta  # y is a fresh array from the base product
    return y, LoraLinearCtx(base=base, adapter=adapter)


def lora_backward(dy: np.ndarray, ctx: LoraLinearCtx
                  ) -> tuple[np.ndarray, None, None, np.ndarray, np.ndarray]:
    """Returns (dx, dW, dbias, dA, dB) in the forward's input order; dW and dbias are None, since
    the base is frozen and its backward computes dx only."""
    dx_base, _, _ = linear_backward(dy, ctx.base)
    dx_adapter, da, db = lora_delta_backward(dy, ctx.adapter)
    dx = dx_base + dx_adapter  # fan-out: x feeds the frozen base and the adapter
    return dx, None, None, da, db


def lora_merge(w: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """W + s · A B: the base weight with the adapter folded in (a new array, W's dtype).
    (C_in, C_out) + (C_in, r) @ (r, C_out)."""
    return (w + (a @ b) * float(scale)).astype(w.dtype, copy=False)


def lora_unmerge(w_merged: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """W' - s · A B: the base weight back from a merged one (up to float rounding)."""
    return (w_merged - (a @ b) * float(scale)).astype(w_merged.dtype, copy=False)
