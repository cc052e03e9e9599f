"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus).

    greedy       temperature == 0: the argmax (ties go to the lowest id)
    temperature  divide logits by T: T < 1 sharpens, T > 1 flattens
    top-k        keep the k largest logits (ties at the k-th value are all kept)
    top-p        keep the smallest set of most likely tokens whose probability sums to >= p
                 (the most likely token is always kept), as HF's TopPLogitsWarper

`sample_rows` is the same choice for a batch whose rows each have their own temperature, top-p
and generator (a server's requests, glassformer/serve/).

Filters apply in the order temperature, top-k, top-p, then one draw from the remaining
distribution with an explicit np.random.Generator, so a seed reproduces the choice.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.softmax import softmax_forward


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Clear errors for settings that have no meaning."""
    if not temperature >= 0.0:
        raise GlassformerError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise GlassformerError(f"top_k must be an integer >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise GlassformerError(f"top_p must be in (0, 1], got {top_p}")


def top_k_filter(logits: np.ndarray, k: int) -> np.ndarray:
    """Set every logit below the k-th largest of its row to -inf. (B, V) -> (B, V)."""
    if k >= logits.shape[-1]:
        return logits
    kth = np.partition(logits, -k, axis=-1)[:, -k][:, None]   # (B, V) -> (B, 1)
    return np.where(logits < kth, -np.inf, logits)


def top_p_filter(logits: np.ndarray, p) -> np.ndarray:
    """Keep the nucleus: the fewest most-likely tokens whose probabilities reach p. (B, V).

    p: one float, or one per row as a (B, 1) array (a server's rows each have their own)."""
    if np.all(np.asarray(p) >= 1.0):
        return logits
    order = np.argsort(-logits, axis=-1, kind="stable")            # (B, V) most likely first
    sorted_logits = np.take_along_axis(logits, order, axis=-1)
    probs, _ = softmax_forward(sorted_logits)
    before = np.cumsum(probs, axis=-1) - probs                      # mass of strictly likelier
    drop_sorted = before >= p                                       # the first token: before = 0
    drop = np.empty_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, axis=-1)            # back to vocabulary order
    return np.where(drop, -np.inf, logits)


def sample_next(logits: np.ndarray, *, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, rng: np.random.Generator | None = None
                ) -> np.ndarray:
    """Pick one id per row. logits (B, V) -> ids (B,) int64."""
    check_sampling(temperature, top_k, top_p)
    if temperature == 0.0:
        return np.argmax(logits, axis=-1).astype(np.int64)
    if rng is None:
        raise GlassformerError("sampling with temperature > 0 needs rng, an np.random.Generator")
    scaled = logits.astype(np.float64) / float(temperature)  # float64: exact cumulative sums
    if top_k is not None:
        scaled = top_k_filter(scaled, int(top_k))
    if top_p is not None:
        scaled = top_p_filter(scaled, float(top_p))
    probs, _ = softmax_forward(scaled)                              # (B, V)
    return draw_ids(probs, rng.random((probs.shape[0], 1)))


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


def sample_rows(logits: np.ndarray, temperature: np.ndarray, top_p: np.ndarray,
                rngs: list) -> np.ndarray:
    """One id per row, each row with its own settings: logits (B, V), temperature (B,) (0 =
    greedy), top_p (B,) (1 = off), rngs B generators. A row picks what sample_next would pick
    for it alone with the same generator: one uniform per sampled row, from its own generator.
    """
    ids = np.argmax(logits, axis=-1).astype(np.int64)               # (B,) greedy rows keep this
    sampled = np.flatnonzero(temperature > 0.0)
    if sampled.size == 0:
        return ids
    temps = temperature[sampled].astype(np.float64)[:, None]        # (b, 1)
    scaled = logits[sampled].astype(np.float64) / temps             # (b, V) float64 as above
    scaled = top_p_filter(scaled, top_p[sampled][:, None])
    probs, _ = softmax_forward(scaled)                              # (b, V)
    # note: a loop over rows, but only for one scalar each: every request owns its seed.
    uniforms = np.array([[rngs[row].random()] for row in sampled])  # (b, 1)
    ids[sampled] = draw_ids(probs, uniforms)
    return ids
