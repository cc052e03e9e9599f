"""Neighbour heads (models/neighbour_heads.py): layer 0 of a new BERT starts reading fixed
neighbours, and refuses a head too small for its position code."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models.bert import BertConfig, init_params
from glassformer.models.neighbour_heads import held_keys, offsets


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


@pytest.mark.parametrize("d_model, n_head, seq", [(128, 4, 32), (96, 3, 24), (64, 2, 17)])
def test_each_head_starts_on_its_neighbour(d_model, n_head, seq):
    cfg = BertConfig(vocab_size=300, max_seq_len=seq, n_layer=2, n_head=n_head,
                     d_model=d_model, mlm_head=True, neighbour_heads=True)
    params = init_params(cfg, np.random.default_rng(0))
    assert all(value.dtype == np.float32 for value in params.values())
    ids = np.random.default_rng(1).integers(0, 300, seq)
    weights = layer0_attention(params, cfg, ids)
    inside = np.arange(3, seq - 3)
    for h, delta in enumerate(offsets(n_head)):
        on_neighbour = weights[h, inside, inside + delta]
        assert on_neighbour.mean() > 0.6, (h, delta, on_neighbour.mean())
    assert offsets(5) == [-1, 1, -2, 2, -3]


def test_without_the_flag_nothing_changes_and_nothing_is_held():
    cfg = BertConfig(vocab_size=50, max_seq_len=16, n_layer=1, d_model=64, n_head=2)
    assert held_keys(cfg) == ()
    on = BertConfig(vocab_size=50, max_seq_len=16, n_layer=1, d_model=64, n_head=2,
                    neighbour_heads=True)
    assert "pos_emb" in held_keys(on) and "blocks.0.attn.wq" in held_keys(on)
    plain, neighbour = (init_params(c, np.random.default_rng(0)) for c in (cfg, on))
    # the same draws: only the embeddings and layer 0's attention are rewritten
    assert all(np.array_equal(plain[key], neighbour[key]) for key in plain
               if not key.startswith(("tok_emb", "pos_emb", "blocks.0.attn.w")))


def test_a_head_too_small_for_the_table_is_refused_in_one_line():
    with pytest.raises(GlassformerError, match="head size of at least max_seq_len - 1"):
        BertConfig(vocab_size=50, max_seq_len=48, d_model=128, n_head=4, neighbour_heads=True)
    with pytest.raises(GlassformerError, match="more than one head"):
        BertConfig(vocab_size=50, max_seq_len=16, d_model=32, n_head=1, neighbour_heads=True)
