"""Training an SAE (interpret/sae/train.py): on activations made of a few sparse directions it
learns to explain most of their variance with few features; the decoder rows stay at unit norm;
the folded scale reproduces the scaled SAE on the raw inputs; bad settings are one line."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.interpret.sae.model import SAEConfig, decode, encode
from glassformer.interpret.sae.train import (SAETrainConfig, explained_variance, fold_scale,
                                             train_sae, without_parallel)

C, F = 12, 48


def sparse_rows(rng, n=4096, atoms=24, active=3):
    """Rows that are each the sum of `active` of `atoms` random unit directions, times 5."""
    directions = rng.standard_normal((atoms, C))
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    codes = np.zeros((n, atoms))
    for row in codes:
        row[rng.choice(atoms, active, replace=False)] = rng.uniform(1, 3, active)
    return (5.0 * codes @ directions + 1.0).astype(np.float32)


@pytest.mark.parametrize("cfg", [SAEConfig(d_in=C, d_sae=F, arch="relu", l1=1.0),
                                 SAEConfig(d_in=C, d_sae=F, arch="topk", k=4)], ids=repr)
def test_training_explains_sparse_data(cfg):
    rng = np.random.default_rng(0)
    rows = sparse_rows(rng)
    lines = []
    params, scale, log = train_sae(rows, cfg, SAETrainConfig(steps=300, batch=256, lr=3e-3,
                                                             log_every=100), rng, lines.append)
    assert lines == log and [line["step"] for line in log] == [100, 200, 300]
    assert log[-1]["loss"] < log[0]["loss"]
    np.testing.assert_allclose(np.linalg.norm(params["w_dec"], axis=-1), 1.0, rtol=1e-5)
    raw = fold_scale(params, scale)
    acts = encode(raw, rows, cfg)
    np.testing.assert_allclose(acts, encode(params, rows * scale, cfg), rtol=1e-4, atol=1e-4)
    assert explained_variance(rows, decode(raw, acts)) > 0.8
    l0 = (acts > 0).sum(axis=-1).mean()
    assert l0 <= (4 if cfg.arch == "topk" else 12)


def test_without_parallel_leaves_a_gradient_orthogonal_to_each_row():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, 7))
    w /= np.linalg.norm(w, axis=-1, keepdims=True)
    g = without_parallel(rng.standard_normal((5, 7)), w)
    np.testing.assert_allclose(np.sum(g * w, axis=-1), 0.0, atol=1e-12)


def test_bad_settings_are_one_line():
    with pytest.raises(GlassformerError, match="--steps must be >= 1"):
        SAETrainConfig(steps=0)
    with pytest.raises(GlassformerError, match="--lr must be > 0"):
        SAETrainConfig(lr=0.0)
    with pytest.raises(GlassformerError, match="1 <= k <= d_sae"):
        SAEConfig(d_in=4, d_sae=8, arch="topk", k=9)
    with pytest.raises(GlassformerError, match="unknown SAE architecture"):
        SAEConfig(d_in=4, d_sae=8, arch="gated")
    with pytest.raises(GlassformerError, match="fewer than one batch"):
        train_sae(np.ones((10, 4), np.float32), SAEConfig(d_in=4, d_sae=8, l1=1.0),
                  SAETrainConfig(batch=32), np.random.default_rng(0))
