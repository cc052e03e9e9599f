"""Decoding an encoder-decoder (generate/beam.py): cached greedy equals a full recompute, beam
search equals exhaustive search on a tiny vocabulary (translate's inputs: tests/tasks/)."""
import itertools

import numpy as np
import pytest

from glassformer.generate.beam import beam_search, greedy_search, length_penalty
from glassformer.models import seq2seq
from glassformer.ops.cross_entropy import log_softmax_forward

V, EOS, START, PAD = 5, 1, 2, 0
SCORE_TOL = 1e-5   # float32 log-probs summed over three steps


def tiny(seed=0, vocab=V, scale=3.0):
    """A random tiny model whose logits are spread enough that the best sequence is clear."""
    cfg = seq2seq.Seq2SeqConfig(vocab_size=vocab, max_seq_len=8, n_layer=1, n_head=2, d_model=16,
                                pad_id=PAD, eos_id=EOS, decoder_start_id=START)
    params = seq2seq.init_params(cfg, np.random.default_rng(seed))
    params = {k: (v * scale if v.ndim == 2 else v) for k, v in params.items()}
    return cfg, params


def uncached_greedy(params, cfg, src, steps):
    out = np.full((src.shape[0], 1), START)
    for _ in range(steps):
        logits, _ = seq2seq.forward(params, (src, out), cfg)
        out = np.concatenate([out, logits[:, -1].argmax(-1)[:, None]], axis=1)
    return out[:, 1:]


def test_cached_greedy_equals_full_recompute():
    cfg, params = tiny()
    src = np.random.default_rng(1).integers(3, V, (4, 5))
    fast = greedy_search(params, cfg, src, max_new_tokens=6)
    slow = uncached_greedy(params, cfg, src, 6)
    for row_fast, row_slow in zip(fast, slow):
        n = list(row_slow).index(EOS) + 1 if EOS in row_slow else len(row_slow)
        assert list(row_fast[:n]) == list(row_slow[:n])
        assert np.all(row_fast[n:] == PAD)          # a finished row is padded


def sequence_logp(params, cfg, src_row, seq):
    logits, _ = seq2seq.forward(params, (src_row[None], np.array([[START] + seq[:-1]])), cfg)
    logp, _ = log_softmax_forward(logits[0].astype(np.float64))
    return float(sum(logp[t, tok] for t, tok in enumerate(seq)))


def exhaustive_best(params, cfg, src_row, max_new, alpha):
    """Every output of at most max_new tokens (ending in </s>, or cut at max_new)."""
    best, best_score = None, -np.inf
    for n in range(1, max_new + 1):
        for body in itertools.product([t for t in range(V) if t != EOS], repeat=n - 1):
            for last in range(V):
                seq = list(body) + [last]
                if last != EOS and n < max_new:
                    continue  # an unfinished output only at max_new
                score = sequence_logp(params, cfg, src_row, seq) / length_penalty(n, alpha)
                if score > best_score:
                    best, best_score = seq, score
    return best


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_finds_the_exhaustive_best(alpha):
    cfg, params = tiny(seed=3, scale=1.5)
    src = np.random.default_rng(4).integers(3, V, (3, 4))
    got = beam_search(params, cfg, src, beam=V ** 3, max_new_tokens=3, alpha=alpha)
    for row, out in zip(src, got):
        assert out == exhaustive_best(params, cfg, row, 3, alpha)


def test_beam_one_with_no_penalty_is_greedy():
    cfg, params = tiny(seed=5)
    src = np.random.default_rng(6).integers(3, V, (5, 3))
    greedy = greedy_search(params, cfg, src, max_new_tokens=7)
    beams = beam_search(params, cfg, src, beam=1, max_new_tokens=7, alpha=0.0)
    for row, out in zip(greedy, beams):
        assert list(row[:len(out)]) == out


def test_min_new_tokens_holds_back_eos():
    cfg, params = tiny(seed=7)
    params["logits_bias"] = np.zeros(V, np.float32)
    cfg = seq2seq.Seq2SeqConfig(**{**cfg.__dict__, "logits_bias": True})
    params["logits_bias"][EOS] = 50.0                 # </s> always wins when allowed
    src = np.array([[3, 4]])
    assert list(greedy_search(params, cfg, src, max_new_tokens=5)[0]) == [EOS]
    out = greedy_search(params, cfg, src, max_new_tokens=5, min_new_tokens=3)[0]
    assert list(out[3:4]) == [EOS] and EOS not in out[:3]
    assert beam_search(params, cfg, src, beam=3, max_new_tokens=5, min_new_tokens=2)[0][2] == EOS
