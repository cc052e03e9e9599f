"""The encoder-decoder (models/seq2seq.py, seq2seq_decode.py): float64 gradcheck of the whole
model, every gradient against torch autograd on the same model written with torch ops
(torchref/seq2seq.py), cached decoding equal to the full forward (with beam-style row selection),
the source padding mask, dtypes and bad input."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.seq2seq import CASES
from glassformer.models import seq2seq
from glassformer.models import seq2seq_decode
from glassformer.models.model import Model
from glassformer.models.seq2seq import Seq2SeqConfig

# Finite differences in float64 agree to ~1e-8 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 against torch float32: both round differently at ~1e-7 per op; 1e-5 of the largest
# entry (the bar) leaves room for a few layers of that.
TORCH_RTOL = 1e-5
# Cached decoding sums the same products in another order: float32 rounding only.
CACHE_ATOL = 1e-5

TINY = dict(vocab_size=23, max_seq_len=12, n_layer=2, n_dec_layer=3, n_head=2, d_model=16,
            d_ff=24, pad_id=0)
PAPER = Seq2SeqConfig(**TINY)
BART_LIKE = Seq2SeqConfig(**TINY, norm_position="pre", positions="learned", pos_offset=2,
                          emb_norm=True, activation="gelu", scale_embedding=False,
                          share_embeddings=False, tie_embeddings=False, logits_bias=True)
MARIAN_LIKE = Seq2SeqConfig(**TINY, activation="silu", logits_bias=True)
CONFIGS = {"paper": PAPER, "bart-like": BART_LIKE, "marian-like": MARIAN_LIKE}


def _params(cfg, seed=0, scale=4.0):
    """Init params moved away from init (O(0.1) weights, noisy gains and biases)."""
    rng = np.random.default_rng(seed)
    params = seq2seq.init_params(cfg, rng)
    for name, value in params.items():
        if value.ndim == 2 and not name.endswith("tok_emb"):
            value = value * scale
        elif value.ndim == 1:
            value = value + 0.1 * rng.standard_normal(value.shape)
        params[name] = value.astype(np.float32)
    return params


def _batch(cfg, seed=1, b=3, s=7, t=6):
    """Source ids with right padding in rows 1 and 2, target ids."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, cfg.vocab_size, (b, s))
    src[1, 4:] = cfg.pad_id
    src[2, 2:] = cfg.pad_id
    tgt = rng.integers(1, cfg.vocab_size, (b, t))
    return src, tgt


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


@pytest.mark.parametrize("name", CONFIGS)
def test_logits_and_every_gradient_match_torch(name):
    torch = pytest.importorskip("torch")
    from torchref import seq2seq as torch_seq2seq  # torchref/ sits at the root (pytest pythonpath)
    cfg = CONFIGS[name]
    params = _params(cfg)
    src, tgt = _batch(cfg)
    logits, ctx = seq2seq.forward(params, (src, tgt), cfg)
    dlogits = np.random.default_rng(3).standard_normal(logits.shape).astype(np.float32)
    grads = seq2seq.backward(dlogits, ctx)
    leaves = torch_seq2seq.leaves(params, dtype=torch.float32)
    ref = torch_seq2seq.forward(leaves, cfg, src, tgt, src != cfg.pad_id)
    (ref * torch.from_numpy(dlogits)).sum().backward()
    ref_logits = ref.detach().numpy()
    assert np.abs(logits - ref_logits).max() / np.abs(ref_logits).max() < TORCH_RTOL
    assert set(grads) == set(params)
    for key, grad in grads.items():
        assert grad.dtype == np.float32 and grad.shape == params[key].shape, key
        theirs = leaves[key].grad.numpy()
        scale = np.abs(theirs).max()
        if key.endswith("attn.bk") or key.endswith("cross.bk") or scale == 0.0:
            assert np.abs(grad).max() < 1e-4, key   # exactly zero in exact arithmetic
            continue
        assert np.abs(grad - theirs).max() / scale < TORCH_RTOL, key


@pytest.mark.parametrize("name", CONFIGS)
def test_cached_decoding_equals_the_full_forward(name):
    cfg = CONFIGS[name]
    params = _params(cfg)
    src, tgt = _batch(cfg)
    full, _ = seq2seq.forward(params, (src, tgt), cfg)
    memory, mask = seq2seq_decode.encode(params, src, cfg)
    state = seq2seq_decode.decode_start(params, memory, mask, cfg, max_len=tgt.shape[1])
    steps = [seq2seq_decode.decode_step(params, tgt[:, :2], state, cfg)]   # two tokens at once
    state.kv_cache.advance(2)
    for t in range(2, tgt.shape[1]):
        steps.append(seq2seq_decode.decode_step(params, tgt[:, t:t + 1], state, cfg))
        state.kv_cache.advance(1)
    assert np.abs(np.concatenate(steps, axis=1) - full).max() < CACHE_ATOL


def test_select_rows_repeats_and_reorders_rows_as_beam_search_does():
    cfg = PAPER
    params = _params(cfg)
    src, tgt = _batch(cfg)
    memory, mask = seq2seq_decode.encode(params, src, cfg)
    state = seq2seq_decode.decode_start(params, memory, mask, cfg, max_len=4)
    seq2seq_decode.decode_step(params, tgt[:, :2], state, cfg)
    state.kv_cache.advance(2)
    rows = np.array([2, 2, 0, 1])                      # a repeated row and a new order
    picked = seq2seq_decode.select_rows(state, rows)
    assert picked.kv_cache.length == 2 and picked.src_mask.shape == (4, src.shape[1])
    step = seq2seq_decode.decode_step(params, tgt[rows, 2:3], picked, cfg)
    full, _ = seq2seq.forward(params, (src[rows], tgt[rows, :3]), cfg)
    assert np.abs(step[:, 0] - full[:, 2]).max() < CACHE_ATOL
    assert state.kv_cache.k[0].shape[0] == 3           # the original state is untouched


def test_padding_is_invisible_and_dtypes_are_kept():
    cfg = MARIAN_LIKE
    params = _params(cfg)
    src, tgt = _batch(cfg)
    logits, _ = seq2seq.forward(params, (src, tgt), cfg)
    assert logits.shape == (3, tgt.shape[1], cfg.vocab_size) and logits.dtype == np.float32
    # what sits under the mask does not matter
    masked = src != cfg.pad_id
    other = np.where(masked, src, 5)
    again, _ = seq2seq.forward(params, (other, tgt), cfg, src_mask=masked)
    assert np.array_equal(again, logits)
    # a shorter source row gives the logits of the same row without its padding
    alone, _ = seq2seq.forward(params, (src[2:3, :2], tgt[2:3]), cfg)
    assert np.abs(alone[0] - logits[2]).max() < CACHE_ATOL
    wide = {k: v.astype(np.float64) for k, v in params.items()}
    assert seq2seq.forward(wide, (src, tgt), cfg)[0].dtype == np.float64


def test_bad_input_is_one_clear_error():
    cfg = PAPER
    params = _params(cfg)
    src, tgt = _batch(cfg)
    with pytest.raises(GlassformerError, match="takes x = \\(src_ids"):
        seq2seq.forward(params, src, cfg)
    with pytest.raises(GlassformerError, match="same batch size"):
        seq2seq.forward(params, (src, tgt[:2]), cfg)
    with pytest.raises(GlassformerError, match="past the context"):
        seq2seq.forward(params, (src, np.ones((3, 13), np.int64)), cfg)
    with pytest.raises(GlassformerError, match="source mask has shape"):
        seq2seq.forward(params, (src, tgt), cfg, src_mask=np.ones((3, 2), bool))
    memory, mask = seq2seq_decode.encode(params, src, cfg)
    with pytest.raises(GlassformerError, match="max_len must be"):
        seq2seq_decode.decode_start(params, memory, mask, cfg, max_len=13)
    state = seq2seq_decode.decode_start(params, memory, mask, cfg, max_len=2)
    with pytest.raises(GlassformerError, match="KV cache full"):
        seq2seq_decode.decode_step(params, tgt[:, :3], state, cfg)
    with pytest.raises(GlassformerError, match="positions must be one of"):
        dataclasses.replace(cfg, positions="rope")
    with pytest.raises(GlassformerError, match="pad_id=30 is outside"):
        dataclasses.replace(cfg, pad_id=30)
    # the generic causal-LM paths refuse it in one line
    model = Model(cfg, params)
    with pytest.raises(GlassformerError, match="decodes with glassformer.translate"):
        model.new_cache(1)
    with pytest.raises(GlassformerError, match="to generate, use glassformer.translate"):
        model.forward(src)
    with pytest.raises(GlassformerError, match="needs decoder_input_ids"):
        model(src)
