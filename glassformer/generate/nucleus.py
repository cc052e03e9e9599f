"""Top-p (nucleus) filtering without sorting the whole vocabulary.

Top-p keeps, in each row, the fewest most likely tokens whose probabilities reach p: the token
at place j of the row's decreasing order (ties by id) stays when the mass of the places before
it is below p (HF's TopPLogitsWarper). The reference, `top_p_sorted`, does that literally: a
stable argsort of the whole row (49,152 logits for SmolLM2: ~10 ms a row, most of a server's
sampling time at 8 rows), a softmax in that order, a cumulative sum. But a nucleus is usually a
few dozen tokens, and the kept set is only "every logit above the last kept value, and the
lowest ids among those equal to it", so `top_p_filter` needs the first places' values only:

    1. each row's k largest values (np.partition, k = 64 first), sorted: the first k places
    2. their probabilities exp(x - max) / (sum over the whole row, in any order) and the mass
       before each place, a cumulative sum over those k
    3. a row whose mass reaches p within them is decided: n places kept, the last of value t;
       a row whose k places hold less than p tries again with 8k (k = V decides every row)
    4. kept = x > t, and among the logits equal to t the lowest ids, up to n in all

Exactly the reference's tokens, not nearly. The mass before place j differs between the two
ways only by float rounding: the sum over V terms in another order (each way within V ulps),
the cumulative sums (j ulps), exp of x or of x - max (a few ulps). So a place whose mass is
farther than `margin` (> 4 V ulps, 1e-9 at least) from p gets the same answer both ways, and
every later place is dropped both ways too (the mass only grows, up to that rounding). A row with
a place within the margin of p (an exact boundary such as 0.5 + 0.25 against p = 0.75, or a
one-in-a-billion near one) or a logit that is NaN or +inf sends the whole batch to the reference,
computed just as before (same rows, same shapes, same sums), so even those rows keep their bits.
Rows with p >= 1 keep every token, as in the reference. A row's answer depends on its own logits
only (the reference's BLAS sum may round differently for 1-3 rows than for 4 or more).
"""
from __future__ import annotations

import numpy as np

from glassformer.generate.draw import rounding_margin
from glassformer.ops.softmax import softmax_forward

FIRST_PLACES = 64           # most nuclei at p 0.9 are smaller; a row that needs more grows 8x
GROWTH = 8


def top_p_filter(logits: np.ndarray, p) -> np.ndarray:
    """Keep the nucleus: the fewest most-likely tokens whose probabilities reach p. (B, V).

    p: one float, or one per row as a (B, 1) array (1 or more: that row keeps every token).
    Equal to `top_p_sorted` token for token (see the module docstring)."""
    p = np.asarray(p, dtype=np.float64)
    if np.all(p >= 1.0):
        return logits
    rows, vocab = logits.shape
    p = np.broadcast_to(np.where(p < 1.0, p, np.inf), (rows, 1))   # (B, 1); inf: keeps all
    top = logits.max(axis=-1, keepdims=True)                        # (B, 1)
    if not np.isfinite(top).all():                                  # NaN, +inf, all -inf
        return top_p_sorted(logits, p)
    # note: row by row, so that a row's exps stay in L2 cache (as in draw.py)
    total = np.array([[np.exp(x - peak).sum()] for x, peak in zip(logits, top[:, 0])])  # (B, 1)
    margin = rounding_margin(vocab)
    count = np.full(rows, vocab)                                    # (B,) places kept
    last = np.full((rows, 1), -np.inf)                              # (B, 1) the last's value
    pending = np.flatnonzero(p[:, 0] < np.inf)                      # (n,) rows still open
    k = min(FIRST_PLACES, vocab)
    while pending.size:
        some = pending if pending.size < rows else slice(None)      # no copy for every row
        found = first_places(logits[some], top[some], total[some], p[some], k, margin)
        if found is None:                                           # a place too close to p
            return top_p_sorted(logits, p)
        done, n, value = found                                      # (n,), (n,), (n, 1)
        count[pending[done]], last[pending[done]] = n[done], value[done]
        pending = pending[~done]
        k = min(k * GROWTH, vocab)             # k = V: every place, every row decided
    return np.where(kept_mask(logits, count, last), logits, -np.inf)


def first_places(logits: np.ndarray, top: np.ndarray, total: np.ndarray, p: np.ndarray,
                 k: int, margin: float):
    """Decide each row from its k largest values: (done (B,), n (B,), last (B, 1)), n the places
    kept and last the value of the last one, for the rows done; or None when a place's mass is
    within margin of p (the reference must decide). A row is not done when its k places hold
    less than p and other finite logits are left out."""
    vocab = logits.shape[-1]
    largest = np.partition(logits, vocab - k, axis=-1)[:, vocab - k:]    # (B, k) unordered
    values = np.sort(largest, axis=-1)[:, ::-1]                     # (B, k) places 0..k-1
    # note: ordered and cut on the logits themselves, not on logits - top, where rounding
    # could make two different logits equal
    probs = np.exp(values - top) / total                            # (B, k), -inf -> 0
    before = np.cumsum(probs, axis=-1) - probs                      # mass of strictly likelier
    real = values > -np.inf                                         # (B, k) a finite logit
    surely_in = (before < p - margin) & real
    surely_out = (before >= p + margin) & real
    if (real & ~surely_in & ~surely_out).any():
        return None
    # the k-th value -inf: every finite logit is among the k
    done = surely_out.any(axis=-1) | (values[:, -1] == -np.inf) | (k == vocab)
    n = surely_in.sum(axis=-1)                                      # (B,) >= 1: place 0 is in
    return done, n, np.take_along_axis(values, (n - 1)[:, None], axis=-1)


def kept_mask(logits: np.ndarray, count: np.ndarray, last: np.ndarray) -> np.ndarray:
    """(B, V) bool: in each row every value above last, then the lowest ids of those equal
    to it, count (B,) places in all (the stable argsort's order: ties by id)."""
    kept = logits >= last                                          # (B, V)
    tied = logits == last                                          # (B, V)
    room = count - (kept.sum(axis=-1) - tied.sum(axis=-1))          # (B,) ties that fit
    split = np.flatnonzero(room < tied.sum(axis=-1))                # rows cutting a tie: rare
    if split.size:
        first = np.cumsum(tied[split], axis=-1) <= room[split, None]    # (s, V)
        kept[split] = (logits[split] > last[split]) | (tied[split] & first)
    return kept


def top_p_sorted(logits: np.ndarray, p) -> np.ndarray:
    """The reference: a stable argsort of every row, its softmax and cumulative sum. (B, V).

    p: one float, or one per row as a (B, 1) array (1 or more: that row keeps every token)."""
    p = np.asarray(p, dtype=np.float64)
    if np.all(p >= 1.0):
        return logits
    # subtle: a row with p = 1 keeps every token, though rounding may bring `before` to 1 first
    p = np.where(p < 1.0, p, np.inf)
    order = np.argsort(-logits, axis=-1, kind="stable")            # (B, V) most likely first
    sorted_logits = np.take_along_axis(logits, order, axis=-1)
    probs, _ = softmax_forward(sorted_logits)
    before = np.cumsum(probs, axis=-1) - probs                      # mass of strictly likelier
    drop_sorted = before >= p                                       # the first token: before = 0
    drop = np.empty_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, axis=-1)            # back to vocabulary order
    return np.where(drop, -np.inf, logits)
