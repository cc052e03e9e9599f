"""Decoding an encoder-decoder: greedy search and batched beam search.

Both run the encoder once, project every decoder layer's cross-attention keys/values once
(seq2seq_decode.decode_start), then feed one token per step through the decoder's KV cache
(seq2seq_decode.decode_step). The only Python loop is over steps: the B sources and their K
beams are rows of one batch (B K rows for beam search).

Greedy: at each step every unfinished row takes its most likely token; a row that wrote </s>
is finished and gets <pad> after it. Same tokens as transformers' generate(num_beams=1,
do_sample=False).

Beam search, per source, K hypotheses ("beams") alive at a time, each with the sum of its
tokens' log-probabilities:

    step t:   scores (B, K) + log p(next | beam) (B, K, V)  ->  (B, K V) candidates
              the 2K best candidates, best first:
                </s> candidates ranked among the first K  -> finished, scored by
                    sum log p / lp(|Y|),  lp(n) = ((5 + n) / 6)^alpha    (GNMT, Wu et al. 2016)
                    |Y| = the output's length with its </s>; the finished pool keeps the K best
                the K best candidates that are not </s>    -> the next step's beams
              the decoder state's rows are reordered to follow their beams (select_rows)
    a source is done when its pool holds K hypotheses and no alive beam can still beat the
    worst: a beam's sum only falls, so its best possible score is sum / lp(max_new_tokens)
    (alpha >= 0). At max_new_tokens the alive beams join the pool as they are.

At step 0 only beam 0 is alive (the others start at -inf), so the K beams do not repeat one
hypothesis. alpha = 0 gives the plain sum of log-probabilities, which transformers' beam search
with length_penalty=0 uses too (its own length penalty, sum / |Y|^alpha, differs for alpha > 0).

min_new_tokens: </s> gets probability 0 before that many tokens (transformers'
MinNewTokensLengthLogitsProcessor).
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models import seq2seq_decode
from glassformer.ops.cross_entropy import log_softmax_forward

DEFAULT_ALPHA = 0.6   # GNMT's length penalty exponent (Wu et al. 2016 use 0.6 - 0.7)


def check_decoding(cfg, src_ids: np.ndarray, *, beam: int, max_new_tokens: int,
                   min_new_tokens: int) -> None:
    """One clear line for a request that cannot be decoded."""
    if int(beam) != beam or beam < 1:
        raise GlassformerError(f"beam width must be an integer >= 1, got {beam}")
    if int(max_new_tokens) != max_new_tokens or not 1 <= max_new_tokens <= cfg.max_seq_len:
        raise GlassformerError(f"max_new_tokens must be an integer in [1, {cfg.max_seq_len}] "
                               f"(the model's context max_seq_len), got {max_new_tokens}")
    if int(min_new_tokens) != min_new_tokens or not 0 <= min_new_tokens <= max_new_tokens:
        raise GlassformerError(f"min_new_tokens must be an integer in [0, max_new_tokens="
                               f"{max_new_tokens}], got {min_new_tokens}")
    if src_ids.ndim != 2 or src_ids.shape[0] == 0 or src_ids.shape[1] == 0:
        raise GlassformerError(f"expected source ids of shape (B, S), non-empty, got "
                               f"{src_ids.shape}")
    if src_ids.shape[1] > cfg.max_seq_len:
        raise GlassformerError(f"a source of {src_ids.shape[1]} tokens is longer than the "
                               f"model's context max_seq_len={cfg.max_seq_len}")
    if src_ids.dtype.kind not in "iu" or src_ids.min() < 0 or src_ids.max() >= cfg.vocab_size:
        raise GlassformerError(f"source ids must be integers in [0, {cfg.vocab_size})")


def _log_probs(logits: np.ndarray, step: int, min_new_tokens: int, eos_id: int) -> np.ndarray:
    """(N, 1, V) logits of the newest position -> (N, V) log-probabilities, </s> barred before
    min_new_tokens."""
    logp, _ = log_softmax_forward(logits[:, -1])                 # (N, V)
    if step < min_new_tokens:
        logp[:, eos_id] = -np.inf
    return logp


def _start(params: dict, cfg, src_ids: np.ndarray, src_mask, rows: int, max_new_tokens: int):
    """Encode once; the decoder state with each source repeated `rows` times (its beams)."""
    memory, mask = seq2seq_decode.encode(params, src_ids, cfg, src_mask=src_mask)  # (B, S, C)
    state = seq2seq_decode.decode_start(params, memory, mask, cfg, max_new_tokens)
    if rows > 1:
        repeat = np.repeat(np.arange(src_ids.shape[0]), rows)    # (B,) -> (B K,) 0 0 1 1 ...
        state = seq2seq_decode.select_rows(state, repeat)
    return state


def greedy_search(params: dict, cfg, src_ids: np.ndarray, *, src_mask=None,
                  max_new_tokens: int, min_new_tokens: int = 0) -> np.ndarray:
    """(B, S) sources -> (B, n) output ids, n <= max_new_tokens: each row its most likely token
    per step, </s> included, cfg.pad_id after it."""
    b = src_ids.shape[0]
    state = _start(params, cfg, src_ids, src_mask, 1, max_new_tokens)
    tokens = np.full((b, 1), cfg.decoder_start_id, dtype=np.int64)   # the decoder's first input
    out = []
    finished = np.zeros(b, dtype=bool)
    for step in range(max_new_tokens):
        logits = seq2seq_decode.decode_step(params, tokens, state, cfg)     # (B, 1, V)
        state.kv_cache.advance(1)
        logp = _log_probs(logits, step, min_new_tokens, cfg.eos_id)
        next_ids = np.where(finished, cfg.pad_id, logp.argmax(axis=-1))  # (B,)
        out.append(next_ids)
        finished |= next_ids == cfg.eos_id
        if finished.all():
            break
        tokens = next_ids[:, None]                                   # (B,) -> (B, 1)
    return np.stack(out, axis=1)                                     # (B, n)


def length_penalty(length: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT's lp(|Y|) = ((5 + |Y|) / 6)^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def _best(scores: np.ndarray, n: int) -> np.ndarray:
    """The column indices of each row's n largest scores (B, n), best first.

    note: argpartition finds them in O(K V) per row; only those n are then sorted (a full sort of
    the K V candidates dominated a step for a large vocabulary)."""
    m = scores.shape[1]
    if n >= m:
        return np.argsort(-scores, axis=1, kind="stable")
    part = np.argpartition(scores, m - n, axis=1)[:, m - n:]         # (B, n), unordered
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def _merge_finished(pool_scores, pool_seqs, new_scores, new_seqs, k: int):
    """The K best of a pool (B, K) and new finished candidates (B, M), with their sequences."""
    scores = np.concatenate([pool_scores, new_scores], axis=1)       # (B, K + M)
    seqs = np.concatenate([pool_seqs, new_seqs], axis=1)             # (B, K + M, T)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]         # (B, K)
    return (np.take_along_axis(scores, best, axis=1),
            np.take_along_axis(seqs, best[:, :, None], axis=1))


def beam_search(params: dict, cfg, src_ids: np.ndarray, *, beam: int, src_mask=None,
                max_new_tokens: int, min_new_tokens: int = 0,
                alpha: float = DEFAULT_ALPHA) -> list[list[int]]:
    """(B, S) sources -> for each, the best hypothesis's ids (its </s> included when it ended).

    See the module docstring for the algorithm; K = beam.
    """
    b, k, v = src_ids.shape[0], int(beam), cfg.vocab_size
    state = _start(params, cfg, src_ids, src_mask, k, max_new_tokens)
    scores = np.full((b, k), -np.inf, dtype=np.float32)              # float32, as transformers
    scores[:, 0] = 0.0                                               # one live beam at first
    seqs = np.full((b, k, max_new_tokens), cfg.pad_id, dtype=np.int64)  # alive beams' tokens
    pool_scores = np.full((b, k), -np.inf)                           # finished, normalized
    pool_seqs = np.full((b, k, max_new_tokens), cfg.pad_id, dtype=np.int64)
    done = np.zeros(b, dtype=bool)
    tokens = np.full((b * k, 1), cfg.decoder_start_id, dtype=np.int64)
    best_lp = length_penalty(np.float64(max_new_tokens), alpha)
    rank = np.arange(2 * k)[None, :]                                 # (1, 2K) candidate ranks
    for step in range(max_new_tokens):
        logits = seq2seq_decode.decode_step(params, tokens, state, cfg)     # (B K, 1, V)
        state.kv_cache.advance(1)
        logp = _log_probs(logits, step, min_new_tokens, cfg.eos_id)   # (B K, V) float32
        cand = (scores[:, :, None] + logp.reshape(b, k, v)).reshape(b, k * v)  # (B, K V)
        top = _best(cand, 2 * k)                                     # (B, 2K) best first
        top_scores = np.take_along_axis(cand, top, axis=1)           # (B, 2K)
        origin, token = top // v, top % v                            # beam and token of each
        history = np.take_along_axis(seqs, origin[:, :, None], axis=1)  # (B, 2K, T)
        history[:, :, step] = token
        is_eos = token == cfg.eos_id
        # finished: </s> candidates among the first K, scored with the length penalty
        ends = is_eos & (rank < k) & ~done[:, None] & np.isfinite(top_scores)
        normalized = np.where(ends, top_scores / length_penalty(np.float64(step + 1), alpha),
                              -np.inf)
        pool_scores, pool_seqs = _merge_finished(pool_scores, pool_seqs, normalized, history, k)
        # alive: the K best candidates that are not </s>, in order
        keep = np.argsort(is_eos, axis=1, kind="stable")[:, :k]      # (B, K) non-</s> first
        scores = np.take_along_axis(top_scores, keep, axis=1)
        seqs = np.take_along_axis(history, keep[:, :, None], axis=1)
        origin = np.take_along_axis(origin, keep, axis=1)            # (B, K)
        # done: K finished and no alive beam can beat the worst of them any more
        done |= (np.isfinite(pool_scores).all(axis=1)
                 & (scores.max(axis=1) / best_lp <= pool_scores.min(axis=1)))
        if done.all():
            break
        rows = (np.arange(b)[:, None] * k + origin).reshape(-1)      # (B K,) beam -> its parent
        state = _follow_parents(state, rows)
        tokens = seqs[:, :, step].reshape(b * k, 1)                  # (B, K) -> (B K, 1)
    else:
        # max_new_tokens reached: the alive beams compete as they are
        alive = np.where(done[:, None], -np.inf,
                         scores / length_penalty(np.float64(max_new_tokens), alpha))
        pool_scores, pool_seqs = _merge_finished(pool_scores, pool_seqs, alive, seqs, k)
    return [_trim(row, cfg.eos_id) for row in pool_seqs[:, 0]]


def _follow_parents(state, rows: np.ndarray):
    """The decoder state with each beam's self-attention cache taken from its parent row.

    note: a beam never changes source, so the cross-attention keys/values and the source mask
    (the same for all K rows of a source) stay as they are; only the KV cache is gathered.
    """
    return state._replace(kv_cache=state.kv_cache.select_rows(rows))  # (B K, H, T_max, D) each


def _trim(ids: np.ndarray, eos_id: int) -> list[int]:
    """A hypothesis's tokens up to and including its </s> (all of them when it has none)."""
    ends = np.flatnonzero(ids == eos_id)
    return ids[:ends[0] + 1].tolist() if ends.size else ids.tolist()
