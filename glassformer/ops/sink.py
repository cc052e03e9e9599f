"""Softmax with an attention sink (gpt-oss; StreamingLLM's idea, made a parameter).

Each head h has one learned logit s_h, joined to every query's row of scores as an extra column,
softmaxed with them, then dropped:

    scores row (S,) + sink s_h  ->  softmax over S + 1 entries  ->  keep the first S
    weights_j = exp(x_j) / (sum_k exp(x_k) + exp(s_h))         sum_j weights_j = 1 - p_sink < 1

The sink's share p_sink = exp(s_h) / (...) is weight the head gives to "nothing": the output is
sum_j weights_j v_j with no v for the sink, so a head that has nothing to read can shrink its
output toward 0 instead of being forced to spread weight 1 over the keys. Matches transformers'
GptOss `eager_attention_forward` (cat, subtract the row max, softmax, drop the last column).

Backward (the sink's column gets no upstream gradient: it was dropped):

    dx_j    = p_j * (dp_j - sum_k dp_k p_k)       the plain softmax rule over the S kept columns
    ds_h    = sum over rows of  p_sink * (0 - sum_k dp_k p_k)

Masked entries get exactly 0 weight, as in ops/softmax.py; a row with every key masked puts all
its weight on the sink (p_sink = 1), so it outputs 0, as in transformers.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import ShapeError
from glassformer.ops._check import broadcasts_into, check_float, check_same_dtype
from glassformer.ops._rows import row_sum
from glassformer.ops._shapes import sum_to_shape
from glassformer.ops.softmax import masked_logits, row_max


class SinkSoftmaxCtx(NamedTuple):
    """Saved by the forward.

    probs:       the kept weights (..., T, S), exact zeros where masked (what V is multiplied by).
    sink_probs:  each row's weight on the sink (..., T, 1): what the head gave to nothing.
    sinks_shape: the shape of the sinks given, so backward sums their gradient back into it.
    """
    probs: np.ndarray
    sink_probs: np.ndarray
    sinks_shape: tuple[int, ...]


def sink_softmax_forward(x: np.ndarray, sinks: np.ndarray, *, mask: np.ndarray | None = None
                         ) -> tuple[np.ndarray, SinkSoftmaxCtx]:
    """Softmax of x (..., T, S) over S with one more column, `sinks` (broadcastable to
    (..., T, 1), e.g. (H, 1, 1)), dropped after: weights (..., T, S) summing to 1 - p_sink.

    >>> p, ctx = sink_softmax_forward(np.zeros((1, 2)), np.zeros((1, 1)))
    >>> p.tolist(), ctx.sink_probs.tolist()
    ([[0.3333333333333333, 0.3333333333333333]], [[0.3333333333333333]])
    """
    check_float("x", x)
    check_float("sinks", sinks)
    check_same_dtype(x=x, sinks=sinks)
    column = x.shape[:-1] + (1,)
    if not broadcasts_into(sinks.shape, column):
        raise ShapeError(f"expected sinks broadcastable to (..., T, 1) = {column}, "
                         f"got {sinks.shape}")
    logits = masked_logits(x, mask)                                   # -inf where masked
    sink_col = np.broadcast_to(sinks, column)                         # (..., T, 1)
    shift = np.maximum(row_max(logits), sink_col)                     # (..., T, 1): finite
    exps = np.exp(logits - shift)                                     # (..., T, S), 0 if masked
    sink_exp = np.exp(sink_col - shift)                               # (..., T, 1)
    total = row_sum(exps) + sink_exp                                  # (..., T, 1), >= its max 1
    inv = 1.0 / total
    exps *= inv
    return exps, SinkSoftmaxCtx(probs=exps, sink_probs=sink_exp * inv, sinks_shape=sinks.shape)


def sink_softmax_backward(dprobs: np.ndarray, ctx: SinkSoftmaxCtx
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(dx (..., T, S), dsinks shaped as the forward's sinks)."""
    dot = np.vecdot(dprobs, ctx.probs)[..., None]                     # (..., T, 1)
    dx = dprobs - dot
    dx *= ctx.probs
    dsink_rows = -ctx.sink_probs * dot                                # (..., T, 1)
    return dx, sum_to_shape(dsink_rows, ctx.sinks_shape)
