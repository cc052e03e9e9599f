"""The last step of sampling: one id per row from its filtered logits and one uniform draw.

The reference, `draw_reference`, is what `sample` always did: the softmax of the whole row
(ops/softmax.py, its sum one BLAS product), the cumulative sum of the probabilities, and the
first id whose cumulative probability passes u times the row's total (`draw_ids`). It reads and
writes the (B, V) row about ten times (49,152 float64 values a row for SmolLM2: 3 MB for 8
rows, more than a core's L2 cache), every decoded step.

`draw` skips the normalising: the chosen id is the first whose cumulative sum of exp(x - max)
passes u times the row's total, the same comparison with both sides multiplied by one number.
So it needs exp, one cumulative sum and a binary search a row (~3 passes, a row at a time).
It is exactly the reference's id, not nearly: the cumulative sums of the two ways differ only
by float rounding (sums of V terms in another order, exp of x or of x - max: within 4 V ulps of
the total), so
when the draw falls farther than `margin` (1e-9 of the total) from both cumulative sums around
it, both ways pick the same id. A draw that close to a boundary (about one in a billion), or a
row with NaN or +inf, sends the batch to the reference, computed just as before.
"""
from __future__ import annotations

import numpy as np

from glassformer.ops.softmax import softmax_forward


def rounding_margin(vocab: int) -> float:
    """How far apart (as a share of a row's mass) two sums of the same V probabilities in
    different orders may be at most, with room to spare: 4 (V + 256) ulps, at least 1e-9."""
    return max(1e-9, 4.0 * (vocab + 256) * np.finfo(np.float64).eps)


def draw(logits: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """One id per row of logits (B, V) float64 (-inf: dropped by a filter), by inverting the
    cumulative softmax at uniforms (B, 1) in [0, 1): (B,) int64, `draw_reference`'s ids."""
    top = logits.max(axis=-1)                                       # (B,)
    if not np.isfinite(top).all():                                  # NaN, +inf, all -inf
        return draw_reference(logits, uniforms)
    margin = rounding_margin(logits.shape[-1])
    ids = np.empty(len(logits), dtype=np.int64)
    # note: a loop over rows, each one row's passes: a row of SmolLM2's (393 KB of float64)
    # stays in L2 cache from exp to cumsum to search, where 8 rows at once (3 MB) do not
    # (measured 3x slower batched, docs/performance.md)
    for row, (x, peak, u) in enumerate(zip(logits, top, uniforms[:, 0])):
        ids[row] = draw_row(x, peak, u, margin)
        if ids[row] < 0:                                            # a draw at a boundary
            return draw_reference(logits, uniforms)
    return ids


def draw_row(x: np.ndarray, top: float, u: float, margin: float) -> int:
    """The id one row draws (x (V,), its max top, its uniform u), or -1 when the draw falls
    within margin of the total from a cumulative sum (the reference must decide)."""
    cdf = np.subtract(x, top)                                       # (V,) <= 0, a new array
    np.exp(cdf, out=cdf)                                            # -inf -> 0
    np.cumsum(cdf, out=cdf)                                         # (V,) nondecreasing
    total = cdf[-1]                                                 # >= 1
    at = u * total
    chosen = int(np.searchsorted(cdf, at, side="right"))            # first cdf > at
    below = cdf[chosen - 1] if chosen > 0 else 0.0
    if chosen >= len(cdf) or cdf[chosen] - at <= margin * total or at - below <= margin * total:
        return -1
    return chosen


def draw_reference(logits: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """`draw`'s reference: the softmax of each row, then `draw_ids`. (B, V) -> (B,)."""
    probs, _ = softmax_forward(logits)                              # (B, V)
    return draw_ids(probs, uniforms)


def draw_ids(probs: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """One id per row of probs (B, V), by inverting its cumulative sum at uniforms (B, 1) in
    [0, 1): the first id whose cumulative probability passes the draw."""
    cdf = np.cumsum(probs, axis=-1)                                 # (B, V)
    draws = uniforms * cdf[:, -1:]                                  # (B, 1), within total mass
    ids = (cdf <= draws).sum(axis=-1)                               # first index with cdf > u
    # subtle: rounding could point past the last kept token; step back to one with probability.
    ids = np.minimum(ids, probs.shape[-1] - 1)
    kept_last = probs.shape[-1] - 1 - np.argmax(probs[:, ::-1] > 0.0, axis=-1)
    return np.minimum(ids, kept_last).astype(np.int64)
