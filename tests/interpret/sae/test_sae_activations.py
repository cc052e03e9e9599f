"""What an SAE reads (activations) and writes back (logits_with): putting a hook's value back
gives the model's own logits exactly, on LLaMA and GPT-2; running only the layers up to the hook
gives run_with_cache's value on the whole model; hook_resid_pre of layer L is hook_resid_post of
L - 1 (the embeddings for L = 0); attention sinks are found by norm; bad hooks are one line."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.interpret.cache import run_with_cache
from glassformer.interpret.sae.activations import activations, hook_width, logits_with
from glassformer.interpret.sae.stream import sink_mask, windows
from sae_fixtures import tiny_gpt2, tiny_llama


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2])
def test_putting_a_hook_back_gives_the_models_logits(make):
    model = make()
    ids = np.random.default_rng(1).integers(0, 256, (2, 12))
    clean = model(ids)
    for layer in range(model.cfg.n_layer):
        for hook in (f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_resid_post"):
            value = activations(model, ids, hook)
            assert value.shape == (2, 12, model.cfg.d_model)
            np.testing.assert_array_equal(logits_with(model, ids, hook, value), clean)


def test_resid_pre_is_the_previous_resid_post_and_the_embeddings_first():
    model = tiny_llama()
    ids = np.random.default_rng(2).integers(0, 256, (1, 9))
    np.testing.assert_array_equal(activations(model, ids, "blocks.0.hook_resid_pre"),
                                  model.params["tok_emb"][ids])
    np.testing.assert_array_equal(activations(model, ids, "blocks.2.hook_resid_pre"),
                                  activations(model, ids, "blocks.1.hook_resid_post"))


def test_the_last_resid_post_is_what_the_final_norm_reads():
    model = tiny_llama()
    ids = np.random.default_rng(3).integers(0, 256, (1, 7))
    seen = {}
    model.forward(ids, on_layer=lambda i, ctx, x_in, x_out: seen.update({i: x_out}))
    np.testing.assert_array_equal(activations(model, ids, "blocks.2.hook_resid_post"), seen[2])


def test_zeroing_a_hook_changes_the_logits():
    model = tiny_llama()
    ids = np.random.default_rng(4).integers(0, 256, (1, 8))
    zeroed = logits_with(model, ids, "blocks.1.hook_resid_post", np.zeros((1, 8, 16), np.float32))
    assert np.abs(zeroed - model(ids)).max() > 1e-3


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2])
def test_activations_equal_run_with_cache_on_the_whole_model(make):
    """Running only the layers up to the hook's gives the value the whole forward reads."""
    model = make()
    ids = np.random.default_rng(5).integers(0, 256, (2, 10))
    hooks = ["blocks.0.hook_resid_post", "blocks.1.hook_mlp_out", "blocks.1.hook_resid_mid",
             "blocks.2.hook_attn_out", "ln_final.hook_normalized"]
    _, cache = run_with_cache(model, ids, names=hooks)
    for hook in hooks:
        np.testing.assert_array_equal(activations(model, ids, hook), cache[hook])


@pytest.mark.parametrize("hook, message", [
    ("blocks.1.attn.hook_z", "one vector per position"),
    ("blocks.7.hook_resid_post", "unknown hook name"),
    ("resid", "unknown hook name"),
])
def test_bad_hooks_are_one_line(hook, message):
    with pytest.raises(GlassformerError, match=message):
        hook_width(tiny_llama(), hook)


def test_a_replacement_of_the_wrong_shape_is_refused():
    model = tiny_llama()
    ids = np.zeros((1, 5), dtype=np.int64)
    with pytest.raises(GlassformerError, match="blocks.0.hook_resid_post"):
        logits_with(model, ids, "blocks.0.hook_resid_post", np.zeros((1, 4, 16), np.float32))


def test_sink_mask_finds_the_long_rows():
    rows = np.ones((2, 6, 4), np.float32)
    rows[0, 0] *= 100.0
    rows[1, 3] *= 50.0
    expected = np.zeros((2, 6), bool)
    expected[0, 0] = expected[1, 3] = True
    np.testing.assert_array_equal(sink_mask(rows), expected)


def test_windows_refuse_a_short_text():
    with pytest.raises(GlassformerError, match="lower --tokens"):
        windows(np.arange(100), 16, 200)
    assert windows(np.arange(100), 16, 64, offset=10).tolist()[0][0] == 10
