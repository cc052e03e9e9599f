"""KV-cache generation: cached logits equal a full recompute at every step, batches with left
padding give each prompt's own tokens, the window slides past the context, sampling is sound."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate, positions_from_mask
from glassformer.generate.sampling import sample_next, top_k_filter, top_p_filter
from glassformer.models import gpt2, llama
from glassformer.models.model import Model

# Cached and uncached logits differ only by float32 summation order: 1e-5 is the bar.
CACHE_ATOL = 1e-5
STEPS = 50


def _sharpened(family, cfg):
    params = family.init_params(cfg, np.random.default_rng(0))
    for key in params:  # sharper than init so greedy choices are not near-ties
        if params[key].ndim == 2:
            params[key] = (params[key] * 6.0).astype(np.float32)
    return Model(cfg, params)


@pytest.fixture(scope="module")
def model():
    return _sharpened(gpt2, gpt2.GPT2Config(vocab_size=23, max_seq_len=64, n_layer=2, n_head=4,
                                            d_model=32))


@pytest.fixture(scope="module")
def llama_model():
    """LLaMA-style: RoPE (positions read from the cache offset), GQA with 2 KV heads for 4."""
    return _sharpened(llama, llama.LlamaConfig(vocab_size=23, max_seq_len=128, n_layer=2,
                                               n_head=4, n_kv_head=2, d_model=32))


def greedy(model, ids, steps, **kwargs):
    return np.stack(list(generate(model, ids, max_new_tokens=steps, temperature=0.0, **kwargs)),
                    axis=1)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("prompt_len", [1, 5, 13])
def test_cached_logits_equal_full_recompute_every_step(request, family, prompt_len):
    model = request.getfixturevalue("model" if family == "gpt2" else "llama_model")
    rng = np.random.default_rng(prompt_len)
    ids = rng.integers(0, 23, (3, prompt_len))
    mask = np.ones(ids.shape, dtype=bool)
    mask[1, :prompt_len // 2] = False  # a left-padded row in the batch
    cache = model.new_cache(batch=3)
    positions = positions_from_mask(mask)
    cached, _ = model.forward(ids, attention_mask=mask, positions=positions, kv_cache=cache)
    cache.advance(prompt_len)
    for step in range(STEPS):
        full, _ = model.forward(ids, attention_mask=mask, positions=positions_from_mask(mask))
        np.testing.assert_allclose(cached[:, -1], full[:, -1], atol=CACHE_ATOL, rtol=0,
                                   err_msg=f"step {step}")
        next_ids = np.argmax(full[:, -1], axis=-1)[:, None]
        ids = np.concatenate([ids, next_ids], axis=1)
        mask = np.concatenate([mask, np.ones((3, 1), dtype=bool)], axis=1)
        cached, _ = model.forward(next_ids, attention_mask=mask,
                                  positions=positions_from_mask(mask)[:, -1:], kv_cache=cache)
        cache.advance(1)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_greedy_tokens_identical_with_and_without_cache(request, family):
    model = request.getfixturevalue("model" if family == "gpt2" else "llama_model")
    ids = np.random.default_rng(1).integers(0, 23, (2, 6))
    np.testing.assert_array_equal(greedy(model, ids, STEPS),
                                  greedy(model, ids, STEPS, use_cache=False))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_batched_left_padding_equals_each_prompt_alone(request, family):
    model = request.getfixturevalue("model" if family == "gpt2" else "llama_model")
    prompts = [[3, 7, 1], [5, 2, 9, 11, 4, 6], [8]]
    width = max(len(p) for p in prompts)
    ids = np.zeros((3, width), dtype=np.int64)
    mask = np.zeros((3, width), dtype=bool)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = prompt
        mask[row, width - len(prompt):] = True
    batched = greedy(model, ids, 20, attention_mask=mask)
    for row, prompt in enumerate(prompts):
        alone = greedy(model, np.array([prompt]), 20)
        np.testing.assert_array_equal(batched[row], alone[0])


def test_window_slides_past_the_context_cached_equals_uncached(model):
    ids = np.random.default_rng(2).integers(0, 23, (1, 60))
    cached = greedy(model, ids, 12)
    uncached = greedy(model, ids, 12, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    # past the context each step sees exactly the last 64 tokens, as nanoGPT crops
    full = np.concatenate([ids, cached], axis=1)
    window = full[:, -1 - 64:-1]
    logits, _ = model.forward(window)
    assert np.argmax(logits[0, -1]) == cached[0, -1]


def test_seeded_sampling_is_reproducible(model):
    ids = np.array([[1, 2, 3]])
    first = greedy_like = list(generate(model, ids, max_new_tokens=15, temperature=1.0, seed=7))
    again = list(generate(model, ids, max_new_tokens=15, temperature=1.0, seed=7))
    other = list(generate(model, ids, max_new_tokens=15, temperature=1.0, seed=8))
    assert np.array_equal(np.stack(first), np.stack(again))
    assert not np.array_equal(np.stack(greedy_like), np.stack(other))


def test_stop_token_ends_generation(model):
    ids = np.array([[1, 2, 3]])
    tokens = greedy(model, ids, 30)[0]
    stop = int(tokens[4])
    first_hit = int(np.argmax(tokens == stop))
    stopped = greedy(model, ids, 30, stop=[stop])[0]
    np.testing.assert_array_equal(stopped, tokens[:first_hit + 1])


def test_top_k_never_leaves_the_k_best():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((4, 50))
    best = np.argsort(-logits, axis=-1)[:, :5]
    for seed in range(300):
        ids = sample_next(logits, temperature=1.3, top_k=5, rng=np.random.default_rng(seed))
        assert all(ids[row] in best[row] for row in range(4))


def test_top_p_never_leaves_the_nucleus():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 40)) * 3.0
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    for row in range(3):
        order = np.argsort(-probs[row])
        cumulative = np.cumsum(probs[row][order])
        nucleus = set(order[:int(np.searchsorted(cumulative, 0.8)) + 1].tolist())
        for seed in range(200):
            chosen = sample_next(logits[row:row + 1], top_p=0.8, rng=np.random.default_rng(seed))
            assert int(chosen[0]) in nucleus
    kept = np.isfinite(top_p_filter(logits, 0.8))
    assert kept.any(axis=-1).all()


def test_low_temperature_is_greedy():
    logits = np.random.default_rng(5).standard_normal((6, 30))
    greedy_ids = sample_next(logits, temperature=0.0)
    cold = sample_next(logits, temperature=1e-4, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(greedy_ids, cold)
    assert np.isfinite(top_k_filter(logits, 1)).sum() == 6


@pytest.mark.parametrize("kwargs,message", [
    (dict(ids=np.zeros((1, 0), dtype=np.int64)), "non-empty prompt"),
    (dict(ids=np.array([[1, 99]])), "outside the vocabulary"),
    (dict(max_new_tokens=-1), "max_new_tokens must be"),
    (dict(top_p=0.0), "top_p must be in"),
    (dict(top_p=1.5), "top_p must be in"),
    (dict(top_k=0), "top_k must be"),
    (dict(attention_mask=np.ones((1, 2), dtype=bool)), "attention_mask has shape"),
    (dict(attention_mask=np.array([[1, 0, 1]])), "left padding"),
])
def test_bad_input_is_a_clear_error(model, kwargs, message):
    args = dict(ids=np.array([[1, 2, 3]]), max_new_tokens=3)
    args.update(kwargs)
    with pytest.raises(GlassformerError, match=message):
        list(generate(model, args.pop("ids"), **args))


def test_rope_model_refuses_to_run_past_its_context(llama_model):
    with pytest.raises(GlassformerError, match="ask for at most 28 new tokens"):
        list(generate(llama_model, np.ones((1, 100), dtype=np.int64), max_new_tokens=40))


@pytest.mark.parametrize("family", ["model", "llama_model"])
def test_last_only_logits_are_the_last_row(request, family):
    """Generation asks only for the last position's logits; they equal the full forward's."""
    m = request.getfixturevalue(family)
    ids = np.random.default_rng(3).integers(0, 23, (2, 9))
    full, _ = m.forward(ids)
    last, _ = m.forward(ids, last_only=True)
    assert last.shape == (2, 1, 23)
    np.testing.assert_allclose(last, full[:, -1:], atol=1e-6)


def test_a_cached_forward_keeps_no_layer_ctx_and_refuses_backward(llama_model):
    """Generation keeps no activations for a backward that never comes (a long prompt's would
    take gigabytes); asking for one is an error, not zero gradients."""
    ids = np.arange(6)[None, :]
    logits, ctx = llama_model.forward(ids, kv_cache=llama_model.new_cache(1))
    assert ctx.blocks is None
    with pytest.raises(GlassformerError, match="inference only"):
        llama_model.family.backward(np.ones_like(logits), ctx)
