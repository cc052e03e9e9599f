"""What a row has already written changes its next logits: logit_bias and the three penalties.

These are the adjustments OpenAI's API and its compatible servers take besides temperature and
the filters. Each is a row-wise NumPy function of the logits (B, V) and, for the penalties, of
the ids each row has seen; `sample` (sampling.py) applies them in vLLM's order, before
temperature, so a greedy row feels them too:

    logit_bias          add bias[i] to token i's logit (OpenAI: a value in [-100, 100];
                        -100 bans a token, 100 all but forces it); HF's SequenceBiasLogitsProcessor
                        with one-token sequences
    repetition_penalty  every id in the prompt or the reply so far: a positive logit is divided
                        by r, a negative one multiplied (r > 1 discourages repeating); HF's
                        RepetitionPenaltyLogitsProcessor (CTRL's)
    frequency_penalty   minus f x (how often the id is in the reply so far)      OpenAI's, reply
    presence_penalty    minus p x (1 if the id is in the reply so far else 0)    ids only

A row whose values are "off" (no bias, r = 1, f = p = 0) is left as it was, bit for bit.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class History(NamedTuple):
    """The ids one row has seen: its prompt and its reply so far (arrays or lists of ints)."""
    prompt: object
    output: object


def counts(ids_per_row: list, vocab: int) -> np.ndarray:
    """How many times each id occurs in each row's ids: B lists -> (B, V) int64."""
    # note: a loop over rows, each one bincount: a row's ids are its own length
    return np.stack([np.bincount(np.asarray(ids, dtype=np.int64), minlength=vocab)[:vocab]
                     for ids in ids_per_row])


def bias_matrix(biases: list, vocab: int) -> np.ndarray:
    """Each row's logit_bias (pairs of id and bias) as a dense (B, V) float64 array."""
    dense = np.zeros((len(biases), vocab), dtype=np.float64)
    for row, pairs in enumerate(biases):
        for token, value in pairs:
            dense[row, token] += value
    return dense


def repetition_penalty(logits: np.ndarray, seen: np.ndarray, penalty: np.ndarray) -> np.ndarray:
    """CTRL's penalty on the ids each row has seen: logits (B, V), seen (B, V) bool, penalty
    (B, 1) (1: off) -> (B, V). Positive logits shrink toward 0, negative ones grow away."""
    hit = np.where(logits < 0, logits * penalty, logits / penalty)
    return np.where(seen, hit, logits)


def frequency_presence(logits: np.ndarray, output_counts: np.ndarray, frequency: np.ndarray,
                       presence: np.ndarray) -> np.ndarray:
    """OpenAI's penalties on the reply's ids: logits (B, V), output_counts (B, V), frequency
    and presence (B, 1) (0: off) -> (B, V)."""
    return logits - frequency * output_counts - presence * (output_counts > 0)


def penalize(logits: np.ndarray, settings, histories: list | None) -> np.ndarray:
    """logit_bias, then repetition, frequency and presence penalties, for the rows that ask.

    logits (B, V); settings: SamplingRows (sampling.py) of the same B rows; histories: B History
    (None: the penalties need one). Returns logits unchanged when no row asks, else a float64
    copy with only the asking rows changed."""
    bias_rows = [i for i, pairs in enumerate(settings.logit_bias) if pairs]
    repeat = settings.repetition_penalty != 1.0                            # (B,)
    reply = (settings.frequency_penalty != 0.0) | (settings.presence_penalty != 0.0)
    if not bias_rows and not repeat.any() and not reply.any():
        return logits
    if (repeat.any() or reply.any()) and histories is None:
        raise ValueError("repetition, frequency and presence penalties need each row's history")
    out = logits.astype(np.float64)                                        # (B, V) a copy
    vocab = logits.shape[-1]
    if bias_rows:
        out[bias_rows] += bias_matrix([settings.logit_bias[i] for i in bias_rows], vocab)
    rows = np.flatnonzero(repeat)
    if rows.size:
        seen = counts([np.concatenate([np.asarray(histories[i].prompt, dtype=np.int64),
                                       np.asarray(histories[i].output, dtype=np.int64)])
                       for i in rows], vocab) > 0                          # (r, V)
        out[rows] = repetition_penalty(out[rows], seen,
                                       settings.repetition_penalty[rows, None])
    rows = np.flatnonzero(reply)
    if rows.size:
        made = counts([histories[i].output for i in rows], vocab)          # (r, V)
        out[rows] = frequency_presence(out[rows], made, settings.frequency_penalty[rows, None],
                                       settings.presence_penalty[rows, None])
    return out
