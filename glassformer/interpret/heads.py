"""Head detectors on repeated random tokens, as ARENA (chapter 1.2) defines them.

    tokens = [BOS] + r + r,    r: seq_len random ids          (B, 1 + 2 seq_len)

A head's score is the mean, over the batch and the stripe's positions, of one diagonal stripe
of its attention pattern (B, H, Q, K):

    previous_token   offset -1            each token attends to the one before it
    duplicate_token  offset -seq_len      a token in the second copy attends to its first copy
    induction        offset -(seq_len-1)  ... to the token after its first copy (the token that
                                          came next last time: the induction pattern)

A score above 0.4 is ARENA's mark of a head that does the job. Scores are (L, H) arrays.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.cache import run_with_cache

OFFSETS = {"previous_token": lambda n: -1, "duplicate_token": lambda n: -n,
           "induction": lambda n: 1 - n}
THRESHOLD = 0.4


def repeated_tokens(model, seq_len: int = 50, batch: int = 4, seed: int = 0,
                    bos: int | None = None) -> np.ndarray:
    """[bos] + r + r for `batch` rows of seq_len random ids (B, 1 + 2 seq_len), int64."""
    vocab = model.cfg.vocab_size
    rng = np.random.default_rng(seed)
    r = rng.integers(0, vocab, size=(batch, seq_len))
    prefix = np.full((batch, 1), bos if bos is not None else 0, dtype=np.int64)
    return np.concatenate([prefix, r, r], axis=1).astype(np.int64)


def stripe_scores(patterns: list[np.ndarray], offset: int) -> np.ndarray:
    """(L, H): the mean of each head's pattern (B, H, Q, K) along the diagonal `offset`."""
    return np.stack([np.diagonal(p, offset=offset, axis1=-2, axis2=-1).mean(axis=(0, 2))
                     for p in patterns])


def head_scores(model, kind: str, *, seq_len: int = 50, batch: int = 4, seed: int = 0,
                bos: int | None = None, max_cache_mb: float | None = None) -> np.ndarray:
    """(L, H) scores of kind "induction", "previous_token" or "duplicate_token" on repeated
    random tokens (module docstring). bos: the id before the two copies (default 0).
    The 1 + 2 seq_len tokens must fit the model's context (a 64-token run: seq_len <= 31).
    max_cache_mb: refuse before running when the patterns would take more."""
    if kind not in OFFSETS:
        raise GlassformerError(f"unknown head score {kind!r}; choose from {', '.join(OFFSETS)}")
    if seq_len < 2 or batch < 1:
        raise GlassformerError(f"seq_len must be at least 2 and batch at least 1, got "
                               f"{seq_len} and {batch}")
    context = getattr(model.cfg, "max_seq_len", None)
    if context is not None and 1 + 2 * seq_len > context:
        raise GlassformerError(f"seq_len {seq_len} makes 1 + 2 x {seq_len} = {1 + 2 * seq_len} "
                               f"tokens, past this model's context of {context}; use a seq_len "
                               f"(--seq-len) of at most {(context - 1) // 2}")
    ids = repeated_tokens(model, seq_len, batch, seed, bos)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layer)]
    _, cache = run_with_cache(model, ids, names, max_cache_mb=max_cache_mb)
    return stripe_scores([cache[n] for n in names], OFFSETS[kind](seq_len))


def strong_heads(scores: np.ndarray, threshold: float = THRESHOLD) -> list[tuple[int, int, float]]:
    """[(layer, head, score)] of the heads above threshold, best first."""
    found = [(int(l), int(h), float(scores[l, h])) for l, h in np.argwhere(scores > threshold)]
    return sorted(found, key=lambda x: -x[2])
