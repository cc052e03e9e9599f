"""Neighbour heads (train/recipes/neighbour_heads.py), the Tang BERT recipe's init: layer 0 of a
new BERT starts reading fixed neighbours (a table longer than the head through searched
frequencies), a head too small for the position code falls back to sinusoids with a note, and
runs saved with the old BertConfig flags still load."""
import dataclasses

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models.bert import BertConfig, init_params
from glassformer.train.loop import TrainConfig
from glassformer.train.recipes import TANG_BERT, tang_bert_start
from glassformer.train.recipes.neighbour_heads import (HELD_KEYS, check_neighbour_heads,
                                                       frequencies, neighbour_heads_init, offsets,
                                                       sinusoid_positions, with_old_held_keys)


def recipe_init(cfg, seed=0):
    """init_params, then the recipe's neighbour heads, from one generator (as new_run does)."""
    rng = np.random.default_rng(seed)
    return neighbour_heads_init(init_params(cfg, rng), cfg, rng)


def layer0_attention(params, cfg, ids):
    """Layer 0's attention weights (H, T, T) for one row of ids, from the embeddings' LayerNorm."""
    x = params["tok_emb"][ids] + params["pos_emb"][: len(ids)] + params["type_emb"][0]
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + cfg.norm_eps)
    x = x * params["emb_norm.w"] + params["emb_norm.b"]
    q = x @ params["blocks.0.attn.wq"] + params["blocks.0.attn.bq"]
    k = x @ params["blocks.0.attn.wk"] + params["blocks.0.attn.bk"]
    d = cfg.d_model // cfg.n_head
    q = q.reshape(len(ids), cfg.n_head, d).transpose(1, 0, 2)         # (H, T, d)
    k = k.reshape(len(ids), cfg.n_head, d).transpose(1, 0, 2)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)                     # (H, T, T)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("d_model, n_head, seq", [(128, 4, 32), (96, 3, 24), (64, 2, 17),
                                                  (128, 4, 128)])   # head size 32 < T - 1
def test_each_head_starts_on_its_neighbour(d_model, n_head, seq):
    cfg = BertConfig(vocab_size=300, max_seq_len=seq, n_layer=2, n_head=n_head,
                     d_model=d_model, mlm_head=True)
    params = recipe_init(cfg)
    assert all(value.dtype == np.float32 for value in params.values())
    ids = np.random.default_rng(1).integers(0, 300, seq)
    weights = layer0_attention(params, cfg, ids)
    inside = np.arange(3, seq - 3)
    for h, delta in enumerate(offsets(n_head)):
        on_neighbour = weights[h, inside, inside + delta]
        assert on_neighbour.mean() > 0.6, (h, delta, on_neighbour.mean())
    assert offsets(5) == [-1, 1, -2, 2, -3]


def test_the_recipe_rewrites_only_the_embeddings_and_layer_0_and_holds_them():
    cfg = BertConfig(vocab_size=50, max_seq_len=16, n_layer=1, d_model=64, n_head=2)
    plain, neighbour = init_params(cfg, np.random.default_rng(0)), recipe_init(cfg)
    # the same draws: only the embeddings and layer 0's attention are rewritten
    assert all(np.array_equal(plain[key], neighbour[key]) for key in plain
               if not key.startswith(("tok_emb", "pos_emb", "blocks.0.attn.w")))
    start = tang_bert_start({**TANG_BERT.model, "d_model": 64, "n_head": 2},
                            TrainConfig(block_size=16, hold_iters=5))
    assert start.after_init is neighbour_heads_init and start.note is None
    assert start.train_cfg.held_keys.split(",") == list(HELD_KEYS)
    assert start.train_cfg.hold_iters == 5


def test_the_frequencies_are_the_uniform_grid_where_it_fits_else_a_seeded_search():
    theta, sidelobe = frequencies(16, 31)            # 2M + 1 = 33 > 31: the Dirichlet kernel
    np.testing.assert_array_equal(theta, 2 * np.pi * np.arange(1, 17) / 33)
    assert sidelobe == -0.5
    theta, sidelobe = frequencies(16, 127)           # the uniform grid would alias at 33
    x = np.arange(1, 128)
    assert np.isclose(np.cos(np.outer(x, theta)).sum(1).max(), sidelobe)
    assert sidelobe < 0.35 * 16
    assert np.array_equal(frequencies(16, 127)[0], theta)   # deterministic: its own fixed seed


def test_a_head_too_small_for_the_table_is_refused_in_one_line():
    check_neighbour_heads(128, 4, 128)
    with pytest.raises(GlassformerError, match="head large enough to point at one position of 128"):
        check_neighbour_heads(64, 8, 128)
    with pytest.raises(GlassformerError, match="more than one head"):
        check_neighbour_heads(32, 1, 16)


def test_heads_that_do_not_fit_start_from_sinusoids_and_say_so():
    train_cfg = TrainConfig(block_size=128, hold_iters=5)
    start = tang_bert_start({**TANG_BERT.model, "d_model": 64, "n_head": 8}, train_cfg)
    assert start.after_init is sinusoid_positions and start.train_cfg == train_cfg
    assert "sinusoids" in start.note and "got 8 of 8 dims for block size 128" in start.note


def test_sinusoid_positions_change_only_the_position_table():
    cfg = BertConfig(vocab_size=50, max_seq_len=16, n_layer=1, d_model=32, n_head=2)
    a = init_params(cfg, np.random.default_rng(0))
    b = sinusoid_positions(init_params(cfg, np.random.default_rng(0)), cfg)
    assert all(np.array_equal(a[k], b[k]) for k in a if k != "pos_emb")
    assert b["pos_emb"].dtype == np.float32 and b["pos_emb"].shape == a["pos_emb"].shape
    np.testing.assert_allclose(b["pos_emb"][0, 1::2], 0.02 * np.sqrt(2.0), rtol=1e-6)  # cos(0)
    np.testing.assert_allclose(b["pos_emb"][0, 0::2], 0.0, atol=1e-12)                  # sin(0)


def test_an_old_run_config_with_the_recipe_flags_loads_and_keeps_its_hold():
    cfg = BertConfig(vocab_size=50, max_seq_len=16, n_layer=1, d_model=64, n_head=2)
    old = {**cfg.to_dict(), "neighbour_heads": True, "sinusoid_init": False}
    assert BertConfig.from_dict(old) == cfg
    saved = TrainConfig(hold_iters=1500)
    assert with_old_held_keys(saved, old).held_keys == ",".join(HELD_KEYS)
    assert with_old_held_keys(saved, cfg.to_dict()) == saved
    already = dataclasses.replace(saved, held_keys="pos_emb")
    assert with_old_held_keys(already, old) == already
