"""The masked-LM objective (train/objectives/mlm.py): BERT's masking, the loss on chosen positions only,
and its gradients equal to the full head's."""
from types import SimpleNamespace

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import bert, gpt2
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.train.objectives.mlm import (MLM, MLMSettings, choose_positions, draw_masked,
                                              mlm_data, mlm_eval_loss, mlm_loss_and_grads)
from glassformer.train.objectives.objective import token_eval_loss, token_loss_and_grads

SPECIALS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
VOCAB = 40
SHARE_TOL = 0.02      # 80/10/10 shares over ~37,000 chosen tokens: binomial sd ~0.2%
FLOAT64_RTOL = 1e-10  # the same sums in another order, in float64


def stream(n=5_000, seed=0):
    return np.random.default_rng(seed).integers(5, VOCAB, n)   # no special ids in the text


def settings(**overrides):
    base = dict(batch_size=4, block_size=16, label_smoothing=0.0)
    return SimpleNamespace(**{**base, **overrides},
                           objective_settings=MLMSettings(mask_prob=0.15))


def test_exact_count_per_row_uniform_positions():
    chosen = choose_positions(np.random.default_rng(0), 3000, 62, 0.15)
    assert (chosen.sum(axis=1) == 9).all()                   # round(0.15 * 62) = 9, every row
    share = chosen.mean(axis=0)                              # each position ~9/62 of the time
    assert np.abs(share - 9 / 62).max() < 0.03
    assert (choose_positions(np.random.default_rng(0), 2, 3, 0.15).sum(axis=1) == 1).all()


def test_draw_frames_masks_80_10_10_and_targets_only_chosen():
    data = mlm_data(stream(), SPECIALS, VOCAB)
    x, y = draw_masked(data, settings(batch_size=2000, block_size=64), np.random.default_rng(1))
    assert x.shape == y.shape == (2000, 64) and x.dtype == y.dtype == np.int64
    assert (x[:, 0] == 2).all() and (x[:, -1] == 3).all()
    assert (y[:, 0] == IGNORE_INDEX).all() and (y[:, -1] == IGNORE_INDEX).all()
    chosen = y != IGNORE_INDEX
    assert (chosen.sum(axis=1) == 9).all()
    masked = (x == 4) & chosen
    unchanged = (x == y) & chosen
    replaced = chosen & ~masked & ~unchanged
    total = chosen.sum()
    assert abs(masked.sum() / total - 0.8) < SHARE_TOL
    # a random token equal to the original counts as unchanged: ~1/35 of the random 10%
    assert abs(replaced.sum() / total - 0.1 * (1 - 1 / 35)) < SHARE_TOL
    assert abs(unchanged.sum() / total - 0.1 * (1 + 1 / 35)) < SHARE_TOL
    assert x[replaced].min() >= 5                            # random tokens are never special
    assert not (x[:, 1:-1][~chosen[:, 1:-1]] == 4).any()     # nothing else is touched


def test_masks_are_new_each_draw_and_reproducible_from_the_generator_state():
    data = mlm_data(stream(), SPECIALS, VOCAB)
    rng = np.random.default_rng(7)
    first = draw_masked(data, settings(), rng)
    state = rng.bit_generator.state
    second = draw_masked(data, settings(), rng)
    assert not np.array_equal(first[1] != IGNORE_INDEX, second[1] != IGNORE_INDEX)
    again = np.random.default_rng(0)
    again.bit_generator.state = state
    for ours, theirs in zip(second, draw_masked(data, settings(), again)):
        np.testing.assert_array_equal(ours, theirs)


def tiny_bert():
    cfg = bert.BertConfig(vocab_size=VOCAB, max_seq_len=16, n_layer=2, n_head=2, d_model=8,
                          d_ff=12, mlm_head=True)
    rng = np.random.default_rng(2)
    params = {k: (v * (1.0 if v.ndim == 1 else 10.0)
                  + rng.standard_normal(v.shape) * (0.3 if v.ndim == 1 else 0.0))
              for k, v in bert.init_params(cfg, rng).items()}                 # float64
    return cfg, params


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_head_on_chosen_rows_equals_the_full_logits_loss_and_grads(smoothing):
    cfg, params = tiny_bert()
    train_cfg = settings(label_smoothing=smoothing)
    x, y = draw_masked(mlm_data(stream(), SPECIALS, VOCAB), train_cfg, np.random.default_rng(3))
    loss, grads, _ = mlm_loss_and_grads(bert.FAMILY, params, cfg, x, y, rng=None, dloss=0.5,
                                     train_cfg=train_cfg)
    full_loss, full_grads, _ = token_loss_and_grads(bert.FAMILY, params, cfg, x, y, rng=None,
                                                 dloss=0.5, train_cfg=train_cfg)
    assert loss == pytest.approx(full_loss, rel=FLOAT64_RTOL)
    assert set(grads) == set(full_grads) == set(params)
    for key in grads:
        np.testing.assert_allclose(grads[key], full_grads[key], rtol=FLOAT64_RTOL, atol=1e-14,
                                   err_msg=key)
    assert mlm_eval_loss(bert.FAMILY, params, cfg, x, y, train_cfg=train_cfg) == \
        pytest.approx(token_eval_loss(bert.FAMILY, params, cfg, x, y, train_cfg=train_cfg),
                      rel=FLOAT64_RTOL)
    assert MLM.name == "mlm" and MLM.loss_and_grads is mlm_loss_and_grads


def test_bad_input_is_one_line():
    with pytest.raises(GlassformerError, match=r"no \[MASK\]"):
        mlm_data(stream(), {"[CLS]": 0, "[SEP]": 1}, VOCAB)
    cfg = gpt2.GPT2Config(vocab_size=VOCAB, max_seq_len=16, n_layer=1, n_head=2, d_model=8)
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    x = np.zeros((1, 16), np.int64)
    with pytest.raises(GlassformerError, match="trains a BERT with a masked-LM head; this "
                                               "model is gpt2"):
        mlm_loss_and_grads(gpt2.FAMILY, params, cfg, x, x, rng=None)
    with pytest.raises(GlassformerError, match="block size of at least 3"):
        draw_masked(mlm_data(stream(), SPECIALS, VOCAB), settings(block_size=2),
                    np.random.default_rng(0))
