"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus).

    greedy       temperature == 0: the argmax (ties go to the lowest id)
    temperature  divide logits by T: T < 1 sharpens, T > 1 flattens
    top-k        keep the k largest logits (ties at the k-th value are all kept)
    top-p        keep the smallest set of most likely tokens whose probability sums to >= p
                 (the most likely token is always kept), as HF's TopPLogitsWarper

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


def top_p_filter(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep the nucleus: the fewest most-likely tokens whose probabilities reach p. (B, V)."""
    if p >= 1.0:
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
    cdf = np.cumsum(probs, axis=-1)                                 # (B, V)
    draws = rng.random((probs.shape[0], 1)) * cdf[:, -1:]           # (B, 1), within total mass
    ids = (cdf <= draws).sum(axis=-1)                               # first index with cdf > u
    # subtle: rounding could point past the last kept token; step back to one with probability.
    ids = np.minimum(ids, probs.shape[-1] - 1)
    kept_last = probs.shape[-1] - 1 - np.argmax(probs[:, ::-1] > 0.0, axis=-1)
    return np.minimum(ids, kept_last).astype(np.int64)
