"""Activation patching, attribution patching, logit attribution and head scores on small
models: properties that hold exactly, a finite-difference check of the gradients attribution
patching reads, and the one-line refusals."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.interpret.attribution import (attribution_patch, logit_attribution,
                                               stream_gradients)
from glassformer.interpret.cache import run_with_cache, run_with_hooks
from glassformer.interpret.heads import head_scores, stripe_scores
from glassformer.interpret.patching import logit_diff_metric, patch
from glassformer.models import gpt2, llama
from glassformer.models.model import Model

CLEAN = np.array([[1, 4, 2, 7, 3, 1]])
CORRUPT = np.array([[1, 9, 2, 7, 3, 1]])   # differs at position 1 only


def build(family, cfg, dtype=np.float32):
    params = family.FAMILY.init_params(cfg, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    return Model(cfg, {k: (v * 20 + rng.standard_normal(v.shape) * 0.3).astype(dtype)
                       for k, v in params.items()})


@pytest.fixture(scope="module")
def model():
    return build(llama, llama.LlamaConfig(vocab_size=11, max_seq_len=16, n_layer=2, n_head=4,
                                          n_kv_head=2, d_model=8, d_ff=12))


def test_patching_restores_where_it_must_and_nowhere_else(model):
    metric = logit_diff_metric(5, 6)
    result = patch(model, CLEAN, CORRUPT, metric, ["resid_pre", "resid_post", "z"])
    pre = result.tables["resid_pre"].values
    # layer 0: a position's stream is its own token's embedding, so only position 1 matters
    np.testing.assert_allclose(np.delete(pre[0], 1), result.corrupt, atol=1e-5)
    # the last layer's output at the last position decides the logits there: all restored
    np.testing.assert_allclose(result.tables["resid_post"].values[-1, -1], result.clean,
                               atol=1e-4)
    assert result.tables["z"].values.shape == (2, 4)
    # one cell by hand
    clean_pre = run_with_cache(model, CLEAN, ["blocks.1.hook_resid_pre"])[1]

    def put(value, hook):
        out = value.copy()
        out[0, 3] = clean_pre["blocks.1.hook_resid_pre"][0, 3]
        return out
    by_hand = metric(run_with_hooks(model, CORRUPT, [("blocks.1.hook_resid_pre", put)]))
    assert pre[1, 3] == pytest.approx(by_hand, abs=1e-5)


def test_patching_prompts_of_different_lengths_is_one_line(model):
    with pytest.raises(GlassformerError, match="clean one has 6 tokens, the corrupted one 5"):
        patch(model, CLEAN, CORRUPT[:, :5], logit_diff_metric(5, 6))
    with pytest.raises(GlassformerError, match="unknown patching kind 'resid'"):
        patch(model, CLEAN, CORRUPT, logit_diff_metric(5, 6), ["resid"])


def test_stream_gradients_match_finite_differences():
    model = build(gpt2, gpt2.GPT2Config(vocab_size=11, max_seq_len=16, n_layer=2, n_head=2,
                                        d_model=8), np.float64)
    grads, _ = stream_gradients(model, CLEAN, 5, 6)
    metric = logit_diff_metric(5, 6)
    rng = np.random.default_rng(2)
    for kind, hook in (("resid_pre", "blocks.1.hook_resid_pre"),
                       ("resid_mid", "blocks.0.hook_resid_mid"),
                       ("resid_post", "blocks.1.hook_resid_post")):
        layer = int(hook.split(".")[1])
        for _ in range(3):
            t, c = rng.integers(0, 6), rng.integers(0, 8)
            values = []
            for eps in (1e-5, -1e-5):
                def nudge(value, name, eps=eps):
                    out = value.copy()
                    out[0, t, c] += eps
                    return out
                values.append(metric(run_with_hooks(model, CLEAN, [(hook, nudge)])))
            numeric = (values[0] - values[1]) / 2e-5
            assert grads[kind][layer][0, t, c] == pytest.approx(numeric, rel=1e-5, abs=1e-8)


def test_attribution_patching_follows_real_patching_for_a_small_change(model):
    tables = attribution_patch(model, CLEAN, CORRUPT, 5, 6, kinds=("resid_pre", "z")).tables
    real = patch(model, CLEAN, CORRUPT, logit_diff_metric(5, 6), ["resid_pre"])
    estimate = tables["resid_pre"].values - real.corrupt
    change = real.tables["resid_pre"].values - real.corrupt
    # positions the prompts share: both exactly 0 at layer 0
    np.testing.assert_allclose(np.delete(estimate[0], 1), 0.0, atol=1e-6)
    assert np.sign(estimate[0, 1]) == np.sign(change[0, 1])
    assert tables["z"].values.shape == (2, 4)


def test_logit_attribution_sums_to_the_logit(model):
    result = logit_attribution(model, CLEAN, 5, 6)
    assert result.total == pytest.approx(result.logit, rel=1e-5)
    assert len(result.labels) == 1 + 2 * (4 + 1)            # embed, (4 heads + MLP) x 2 layers
    alone = logit_attribution(model, CLEAN, 5)
    assert alone.total == pytest.approx(float(model(CLEAN)[0, -1, 5]), rel=1e-5)


def test_head_scores():
    seq = 5
    perfect = np.zeros((1, 1, 2 * seq + 1, 2 * seq + 1))
    for q in range(seq + 1, 2 * seq + 1):
        perfect[0, 0, q, q - seq + 1] = 1.0                # the token after the first copy
    # ARENA's mean runs over the whole stripe, whose first two cells lie before the second copy
    assert stripe_scores([perfect], 1 - seq)[0, 0] == pytest.approx(seq / (seq + 2))
    model = build(gpt2, gpt2.GPT2Config(vocab_size=11, max_seq_len=32, n_layer=2, n_head=2,
                                        d_model=8))
    for kind in ("induction", "previous_token", "duplicate_token"):
        scores = head_scores(model, kind, seq_len=6, batch=2)
        assert scores.shape == (2, 2) and (scores >= 0).all() and (scores <= 1).all()
    with pytest.raises(GlassformerError, match="unknown head score"):
        head_scores(model, "copying")
