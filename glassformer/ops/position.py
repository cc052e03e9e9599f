"""Fixed position information: sinusoidal tables (Vaswani et al. 2017) and ALiBi biases (Press et al.
2022, "Train Short, Test Long"). Neither has parameters, so neither has a backward: each is a
constant table built from integers. (A learned `pos_emb` is an embedding lookup, ops/embedding.py.)

Sinusoidal positions, added to the token embeddings (B, T, C) + (T, C) before the first block:

    PE[pos, 2i]     = sin(pos / 10000^(2i / C))
    PE[pos, 2i + 1] = cos(pos / 10000^(2i / C))          i = 0 .. C/2 - 1

Interleaved as in the paper and the Annotated Transformer (even columns sin, odd columns cos);
tensor2tensor (and Marian) instead concatenate [sin | cos], a column permutation of this table:
`fixed_position_table`.
Angles are formed in float64 and the table is cast once to the requested dtype.

ALiBi adds no embedding at all. Each head h gets a slope m_h, and the attention scores receive a
penalty that grows linearly with the distance from query to key:

    scores[h, i, j] = q_i . k_j * scale  +  bias[h, i, j],     bias[h, i, j] = -m_h * (pos_i - j)

with pos_i = i + S - T, the absolute position of query i when the T queries are the newest of S
keys (a KV cache; pos_i = i when S = T), the same end alignment as `causal_mask`:

    m = 1/2, T=2, S=4         key:    0     1     2     3
    query 0 (pos 2)                 -1.0  -0.5   0.0  (+0.5, masked)
    query 1 (pos 3)                 -1.5  -1.0  -0.5   0.0

The attention op takes it as `attention_forward(q, k, v, bias=alibi_bias(H, T, S, dtype=...),
causal=True)`: bias (H, T, S) broadcasts over B, is added to the scaled scores, and then the causal
mask removes keys after the query (their bias is positive and meaningless; ALiBi is defined for
causal attention). The bias is a constant, so attention's backward gives it no gradient.

The paper's reference code (and HF's BLOOM) adds m_h * j instead of -m_h * (pos_i - j). The two
differ by m_h * pos_i, the same for every key of a row, which softmax cancels: identical weights.

Slopes: for H a power of two, the geometric sequence m_h = 2^(-8 (h + 1) / H), h = 0 .. H-1
(H = 8: 1/2, 1/4, ..., 1/256). Otherwise, following the ALiBi reference implementation: take the
slopes for P, the largest power of two below H, then fill the remaining H - P heads with every
other slope of the 2P sequence (its 1st, 3rd, 5th, ...), which interleave between the first ones.
"""
from __future__ import annotations

import numbers

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import FLOAT_DTYPES

_BASE = 10000.0   # the sinusoid wavelength base of Vaswani et al.


def _check_count(name: str, value, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise GlassformerError(f"expected {name} to be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_dtype(dtype) -> np.dtype:
    if np.dtype(dtype) not in FLOAT_DTYPES:
        raise GlassformerError(f"expected dtype float32 or float64, got {np.dtype(dtype)}")
    return np.dtype(dtype)


def sinusoidal_positions(t: int, c: int, *, dtype, offset: int = 0) -> np.ndarray:
    """(T, C) table for positions offset .. offset + T - 1; even columns sin, odd columns cos.

    A constant (no parameters, no backward). `dtype` must match the embeddings it is added to.

    >>> np.round(sinusoidal_positions(2, 4, dtype=np.float64), 4).tolist()
    [[0.0, 1.0, 0.0, 1.0], [0.8415, 0.5403, 0.01, 1.0]]
    """
    t = _check_count("T", t, minimum=1)
    c = _check_count("C", c, minimum=2)
    if c % 2 != 0:
        raise GlassformerError(f"sinusoidal positions need an even width C, got {c}")
    offset = _check_count("offset", offset, minimum=0)
    dtype = _check_dtype(dtype)
    positions = np.arange(offset, offset + t, dtype=np.float64)       # (T,)
    exponents = np.arange(0, c, 2, dtype=np.float64) / c             # (C/2,): 2i / C
    inv_wavelength = 1.0 / (_BASE ** exponents)                      # (C/2,)
    angles = np.outer(positions, inv_wavelength)                     # (T,) x (C/2,) -> (T, C/2)
    table = np.empty((t, c), dtype=np.float64)                       # (T, C)
    table[:, 0::2] = np.sin(angles)                                  # columns 0, 2, 4, ...
    table[:, 1::2] = np.cos(angles)                                  # columns 1, 3, 5, ...
    return table.astype(dtype)


def fixed_position_table(t: int, c: int, *, offset: int = 0, dtype=np.float32) -> np.ndarray:
    """(T, C) table for positions offset .. offset + T - 1, laid out [sin | cos]: the first C/2
    columns sin, the rest cos, as tensor2tensor and Marian (the encoder-decoder's table,
    models/seq2seq_embed.py). The same numbers as `sinusoidal_positions`, columns permuted.

    >>> np.round(fixed_position_table(2, 4, dtype=np.float64), 4).tolist()
    [[0.0, 0.0, 1.0, 1.0], [0.8415, 0.01, 0.5403, 1.0]]
    """
    table = sinusoidal_positions(t, c, dtype=dtype, offset=offset)  # (T, C), sin/cos interleaved
    return np.concatenate([table[:, 0::2], table[:, 1::2]], axis=1)  # -> [sin | cos], (T, C)


def _power_of_two_slopes(n: int) -> np.ndarray:
    """2^(-8 (h + 1) / n) for h = 0 .. n-1: starts at 2^(-8/n) and ends at 2^-8."""
    return 2.0 ** (-8.0 * np.arange(1, n + 1, dtype=np.float64) / n)


def alibi_slopes(n_head: int) -> np.ndarray:
    """(H,) float64 ALiBi slopes, one per head (see the module docstring for the rule).

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    n_head = _check_count("n_head", n_head, minimum=1)
    power = 1 << (n_head.bit_length() - 1)            # largest power of two <= H
    slopes = _power_of_two_slopes(power)              # (P,)
    if power == n_head:
        return slopes
    # note: the 2P sequence at even indices is 2^(-4 (2j + 1) / P): between the first P slopes.
    extra = _power_of_two_slopes(2 * power)[0::2][: n_head - power]   # (H - P,)
    return np.concatenate([slopes, extra])            # (P,) + (H - P,) -> (H,)


def alibi_bias(n_head: int, t: int, s: int, *, dtype) -> np.ndarray:
    """(H, T, S) additive score bias -m_h * (i + S - T - j), for `attention_forward(bias=...)`.

    Queries are the newest T of S positions (S >= T), as with a KV cache.

    >>> alibi_bias(8, 2, 3, dtype=np.float64)[0].tolist()    # head 0 of 8: m = 1/2
    [[-0.5, 0.0, 0.5], [-1.0, -0.5, 0.0]]
    """
    n_head = _check_count("n_head", n_head, minimum=1)
    t = _check_count("T", t, minimum=1)
    s = _check_count("S", s, minimum=1)
    if s < t:
        raise GlassformerError(f"ALiBi expects at least as many keys as queries, got T={t}, S={s}")
    dtype = _check_dtype(dtype)
    query_pos = np.arange(t)[:, None] + (s - t)       # (T, 1): absolute position of each query
    key_pos = np.arange(s)[None, :]                   # (1, S)
    # j - pos_i = -(distance): <= 0 for every key the query may see, written this way round
    # so that the diagonal is +0.0 rather than -0.0.
    key_offset = (key_pos - query_pos).astype(np.float64)  # (1, S) - (T, 1) -> (T, S)
    slopes = alibi_slopes(n_head)                     # (H,)
    bias = slopes[:, None, None] * key_offset[None]   # (H, 1, 1) * (1, T, S) -> (H, T, S)
    return bias.astype(dtype)
