"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer"), forward and backward.

RoPE turns each query and key vector by angles proportional to its position, so the dot product
q_m . k_n depends only on the offset m - n. It is applied to q and k (not v) after the projections
and before the scores, with no parameters.

Layout: Hugging Face's "rotate half", as `transformers`' `LlamaRotaryEmbedding` and
`apply_rotary_pos_emb`. Dimension i is paired with i + D/2 (not with i + 1 as in the paper), and
pair i turns by the angle pos * inv_freq[i]:

    inv_freq[i] = 1 / theta^(2i / D),   i = 0 .. D/2 - 1        (theta = 10000 by default)

    D = 8:    x = [ x0  x1  x2  x3 | x4  x5  x6  x7 ]
                    |   |   |   |    |   |   |   |
                    +---+---+---+----+   |   |   |     pair 0 = (x0, x4), angle a0 (fastest)
                        +---+---+--------+   |   |     pair 1 = (x1, x5), angle a1
                            ... pairs 2 and 3 likewise ...  pair 3 = (x3, x7), angle a3 (slowest)

    each pair is a 2-d vector turned counter-clockwise by its angle a_i:

        out_i       = x_i cos a_i - x_{i+D/2} sin a_i          [ cos a  -sin a ] [ x_i       ]
        out_{i+D/2} = x_i sin a_i + x_{i+D/2} cos a_i          [ sin a   cos a ] [ x_{i+D/2} ]

In vector form, with cos and sin tables that repeat the D/2 angles in both halves (T, D):

    out = x * cos + rotate_half(x) * sin,      rotate_half([x1 | x2]) = [-x2 | x1]

(Meta's original LLaMA code pairs adjacent dims (2i, 2i+1); HF checkpoints permute the rows of wq
and wk once at conversion so that rotate-half gives the same scores. We follow HF.)
DeepSeek-V3's checkpoints keep the adjacent pairs (config.json rope_interleave): `deinterleave`
moves dims (2i, 2i+1) to (i, i + D/2) before the rotation, exactly what transformers'
apply_rotary_pos_emb_interleave computes, and `interleave` (its inverse and its transpose) carries
the gradient back.

Backward: the op is linear in x, out = x * cos + R(x) * sin with R = rotate_half, a fixed signed
permutation with R^T = -R. So

    dx = dout * cos + R^T(dout * sin) = dout * cos - rotate_half(dout * sin)

which, because both halves of the tables hold the same angles, is the rotation by -angle.
ctx keeps only the two tables: x is not needed (the Jacobian does not depend on it).

Scaled RoPE (rope_type linear, dynamic, llama3, yarn, for contexts longer than the training one)
changes only inv_freq, and for YaRN multiplies both tables by a constant: ops/rope_scaling.py.

Cached decoding: positions run offset .. offset + T - 1, so the new tokens of step t use
`rope_tables(T, D, offset=cache_length)`. Angles are formed in float64 and the tables cast to the
requested dtype. HF forms them in float32, so at position p its tables carry an extra error of
about p * 6e-8 radians; ours are the float64 angles rounded once. Derivation: docs/derivations/rope.md.
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, ShapeError
from glassformer.ops._check import (FLOAT_DTYPES, broadcasts_into, check_float,
                                    check_same_dtype, check_shape)
from glassformer.ops.rope_scaling import RopeScaling, rope_frequencies


class RopeCtx(NamedTuple):
    """Saved by `rope_forward`: the (T, D) cos and sin tables, all that backward needs."""
    cos: np.ndarray
    sin: np.ndarray


def _check_even_head_dim(d: int) -> None:
    if d % 2 != 0:
        raise ShapeError(f"RoPE needs an even head dim D, got {d}")


def _check_count(name: str, value, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise GlassformerError(f"expected {name} to be an integer >= {minimum}, got {value!r}")
    return int(value)


def rope_tables(t: int, d: int, *, dtype, theta: float = 10000.0, offset: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of pos * inv_freq for pos = offset .. offset + T - 1, each (T, D).

    Both halves of the last axis repeat the same D/2 angles (HF's layout: cat(freqs, freqs)).
    `dtype` (float32 or float64) has no default: it must match the q and k it will rotate.

    >>> cos, sin = rope_tables(2, 4, theta=100.0, dtype=np.float64)
    >>> np.round(sin, 4).tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.8415, 0.0998, 0.8415, 0.0998]]
    """
    t = _check_count("T", t, minimum=1)
    d = _check_count("D", d, minimum=2)
    _check_even_head_dim(d)
    offset = _check_count("offset", offset, minimum=0)
    if not (isinstance(theta, numbers.Real) and math.isfinite(theta) and theta > 0.0):
        raise GlassformerError(f"expected theta to be a finite number > 0, got {theta!r}")
    if np.dtype(dtype) not in FLOAT_DTYPES:
        raise GlassformerError(f"expected dtype float32 or float64, got {np.dtype(dtype)}")
    return rope_tables_at(np.arange(offset, offset + t), d, dtype=dtype, theta=theta)


def rope_tables_at(positions: np.ndarray, d: int, *, dtype, theta: float = 10000.0,
                   scaling: RopeScaling | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables for explicit integer positions: (T,) -> (T, D), (B, T) -> (B, T, D).

    Per-row positions serve left-padded batches, where each row counts only its real tokens.
    scaling: a scaled RoPE's frequencies (ops/rope_scaling.py); YaRN also scales both tables.

    >>> cos, _ = rope_tables_at(np.array([[0, 1], [0, 0]]), 2, dtype=np.float64)
    >>> cos.shape
    (2, 2, 2)
    """
    positions = np.asarray(positions)
    if positions.dtype.kind not in "iu" or positions.ndim not in (1, 2) or positions.size == 0:
        raise GlassformerError(f"expected integer positions of shape (T,) or (B, T), got "
                               f"{positions.dtype} {positions.shape}")
    if positions.min() < 0:
        raise GlassformerError(f"positions must be >= 0, got {int(positions.min())}")
    d = _check_count("D", d, minimum=2)
    _check_even_head_dim(d)
    if not (isinstance(theta, numbers.Real) and math.isfinite(theta) and theta > 0.0):
        raise GlassformerError(f"expected theta to be a finite number > 0, got {theta!r}")
    if np.dtype(dtype) not in FLOAT_DTYPES:
        raise GlassformerError(f"expected dtype float32 or float64, got {np.dtype(dtype)}")
    inv_freq, attention_factor = rope_frequencies(d, theta=float(theta), scaling=scaling,
                                                  seq_len=int(positions.max()) + 1)  # (D/2,)
    angles = positions.astype(np.float64)[..., None] * inv_freq      # (..., T, 1) * (D/2,) -> (..., T, D/2)
    angles = np.concatenate([angles, angles], axis=-1)               # (..., T, D/2) -> (..., T, D)
    if attention_factor != 1.0:  # YaRN: q and k both grow, the scores by its square
        return ((np.cos(angles) * attention_factor).astype(dtype),
                (np.sin(angles) * attention_factor).astype(dtype))
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def rotate_half(x: np.ndarray) -> np.ndarray:
    """[x1 | x2] -> [-x2 | x1] on the last axis: each pair (i, i + D/2) turned by 90 degrees.

    >>> rotate_half(np.array([1.0, 2.0, 3.0, 4.0])).tolist()
    [-3.0, -4.0, 1.0, 2.0]
    """
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]                     # (..., D) -> 2 x (..., D/2)
    return np.concatenate([-second, first], axis=-1)                 # -> (..., D)


def rope_forward(x: np.ndarray, cos: np.ndarray, sin: np.ndarray
                 ) -> tuple[np.ndarray, RopeCtx]:
    """x * cos + rotate_half(x) * sin. x (..., T, D), cos and sin (T, D) -> (..., T, D).

    The tables may also carry leading dims that broadcast against x, e.g. (B, 1, T, D) for
    per-row positions.

    Use it on q (B, H, T, D) and k (B, K, T, D) alike, with tables from `rope_tables`.

    >>> cos, sin = rope_tables(2, 2, dtype=np.float64)
    >>> out, ctx = rope_forward(np.array([[1.0, 0.0], [1.0, 0.0]]), cos, sin)
    >>> np.round(out, 4).tolist()    # position 1 turns (1, 0) by 1 radian
    [[1.0, 0.0], [0.5403, 0.8415]]
    """
    for name, arr in (("x", x), ("cos", cos), ("sin", sin)):
        check_float(name, arr)
    check_same_dtype(x=x, cos=cos, sin=sin)
    sizes: dict = {}
    check_shape("x", x, ("...", "T", "D"), sizes)
    _check_even_head_dim(sizes["D"])
    table_sizes = {"T": sizes["T"], "D": sizes["D"]}
    check_shape("cos", cos, ("...", "T", "D"), table_sizes)
    check_shape("sin", sin, ("...", "T", "D"), dict(table_sizes, **{"...": cos.shape[:-2]}))
    if not broadcasts_into(cos.shape, x.shape):
        # note: the tables may broadcast over x, never make the output larger than x
        raise ShapeError(f"expected cos/sin tables (T, D) or broadcastable to x {x.shape}, "
                         f"got {cos.shape}")
    # (..., T, D) * (T, D): the tables broadcast over batch and heads
    out = x * cos + rotate_half(x) * sin
    return out, RopeCtx(cos=cos, sin=sin)


def rope_backward(dout: np.ndarray, ctx: RopeCtx) -> np.ndarray:
    """dx = dout * cos - rotate_half(dout * sin), the transpose of the rotation. (..., T, D)."""
    return dout * ctx.cos - rotate_half(dout * ctx.sin)


def deinterleave(x: np.ndarray) -> np.ndarray:
    """[x0 x1 x2 x3 ...] -> [x0 x2 ... | x1 x3 ...] on the last axis: adjacent pairs (2i, 2i+1)
    become rotate-half's pairs (i, i + D/2). (..., D) -> (..., D), a copy.

    >>> deinterleave(np.array([0.0, 1.0, 2.0, 3.0])).tolist()
    [0.0, 2.0, 1.0, 3.0]
    """
    return np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)     # (..., D)


def interleave(x: np.ndarray) -> np.ndarray:
    """The inverse of `deinterleave`, and its backward: a permutation's transpose is its
    inverse. (..., D) -> (..., D).

    >>> interleave(np.array([0.0, 2.0, 1.0, 3.0])).tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    half = x.shape[-1] // 2
    out = np.empty_like(x)
    out[..., 0::2] = x[..., :half]
    out[..., 1::2] = x[..., half:]
    return out
