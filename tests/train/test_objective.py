"""The objective seam: frozen weights stay as they are, tuples of rows split, names resolve."""
from typing import NamedTuple

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import gpt2
from glassformer.train.loop import TrainConfig, new_run, train
from glassformer.train.objectives.next_token import NEXT_TOKEN
from glassformer.train.objectives.objective import rows_of, token_loss_and_grads
from glassformer.train.objectives import objective_of
from glassformer.train.optim import adamw_init

CFG = gpt2.GPT2Config(vocab_size=11, max_seq_len=8, n_layer=1, n_head=2, d_model=16)


class Pair(NamedTuple):
    source: np.ndarray
    target: np.ndarray


def test_rows_of_splits_arrays_tuples_and_named_tuples():
    a, b = np.arange(12).reshape(4, 3), np.arange(8).reshape(4, 2)
    assert rows_of(a, slice(2, 4)).tolist() == a[2:].tolist()
    left, right = rows_of((a, b), slice(0, 2))
    assert left.tolist() == a[:2].tolist() and right.tolist() == b[:2].tolist()
    pair = rows_of(Pair(a, b), slice(1, 3))
    assert isinstance(pair, Pair) and pair.target.tolist() == b[1:3].tolist()


def test_frozen_weights_are_read_but_get_no_grads():
    params = gpt2.init_params(CFG, np.random.default_rng(0))
    trained = {k: v for k, v in params.items() if k.startswith("blocks.0.mlp")}
    frozen = {k: v for k, v in params.items() if k not in trained}
    x = np.random.default_rng(1).integers(0, 11, (2, 8))
    y = np.roll(x, -1, axis=1)
    loss, grads, _ = token_loss_and_grads(gpt2, trained, CFG, x, y, rng=None, frozen=frozen)
    full_loss, full_grads, _ = token_loss_and_grads(gpt2, params, CFG, x, y, rng=None)
    assert loss == full_loss and grads.keys() == trained.keys()
    for key in trained:
        np.testing.assert_array_equal(grads[key], full_grads[key])


def test_a_run_with_frozen_weights_trains_only_the_rest(tmp_path):
    train_cfg = TrainConfig(batch_size=2, block_size=8, max_iters=3, eval_interval=3,
                            eval_iters=1, warmup_iters=1, lr_decay_iters=3, seed=0)
    run = new_run(CFG, train_cfg)
    frozen = {k: v for k, v in run.params.items() if not k.startswith("blocks.0.mlp")}
    before = {k: v.copy() for k, v in frozen.items()}
    run.params = {k: v for k, v in run.params.items() if k not in frozen}
    run.opt = adamw_init(run.params)
    tokens = np.random.default_rng(2).integers(0, 11, 200).astype(np.uint16)
    run = train(CFG, train_cfg, run, train_data=tokens[:150], val_data=tokens[150:],
                out_dir=tmp_path, tokenizer_json={"type": "char", "vocab": []}, frozen=frozen)
    assert run.it == 3 and run.params.keys().isdisjoint(frozen)
    for key, value in frozen.items():
        np.testing.assert_array_equal(value, before[key])


def test_label_smoothing_reaches_the_loss():
    params = gpt2.init_params(CFG, np.random.default_rng(0))
    x = np.random.default_rng(1).integers(0, 11, (2, 8))
    y = np.roll(x, -1, axis=1)
    plain = NEXT_TOKEN.eval_loss(gpt2, params, CFG, x, y, train_cfg=TrainConfig())
    smooth = NEXT_TOKEN.eval_loss(gpt2, params, CFG, x, y,
                                  train_cfg=TrainConfig(label_smoothing=0.1))
    assert plain != smooth


def test_objective_names():
    assert objective_of("next-token") is NEXT_TOKEN
    with pytest.raises(GlassformerError, match="unknown training objective 'nope'"):
        objective_of("nope")
    with pytest.raises(GlassformerError, match="--label-smoothing must be in"):
        TrainConfig(label_smoothing=1.5)
