"""serve/prefill.py's Aligned (serve --batch-invariant's prefill): joiners prefilled together give
each one the logits and keys of its prompt prefilled alone, bit for bit, however the prompt is cut
into chunks and whatever prefix is reused, and those logits are the model's own to float32
rounding."""
import numpy as np
import pytest
from serve_models import tiny_chat_model

from glassformer.serve.prefill import Aligned
from glassformer.serve.rows import RowCache

TEXTS = ["hello there", "a longer prompt about cats and dogs", "x", "what is up, friend?"]


def prefill(model, prompts, chunk, rows=None, cache=None, kept=0):
    cache = cache or RowCache.allocate(model, 4, 96, batch_invariant=True)
    joining = Aligned.start(cache, model, rows or list(range(len(prompts))), prompts, kept)
    while not joining.done:
        joining.feed(model, chunk)
    return joining.finish(cache, np.zeros(4, dtype=bool)), cache


def keys_of(cache, row):
    return [k[row][:, cache.live[row]] for k in cache.cache.k]


@pytest.mark.parametrize("kernels", ["numpy", "numba"])
@pytest.mark.parametrize("chunk", [0, 3, 8])
def test_each_joiner_gets_its_alone_logits_and_keys(kernels, chunk, monkeypatch):
    monkeypatch.setenv("GLASSFORMER_KERNELS", kernels)
    if kernels == "numba":
        pytest.importorskip("numba")
    model = tiny_chat_model(max_seq_len=64)
    prompts = [model.tokenizer.encode(t) for t in TEXTS]
    together, cache = prefill(model, prompts, chunk)
    for i, prompt in enumerate(prompts):
        alone, single = prefill(model, [prompt], chunk, rows=[i])
        np.testing.assert_array_equal(together[i], alone[0])
        for a, b in zip(keys_of(cache, i), keys_of(single, i)):
            np.testing.assert_array_equal(a, b)
        reference, _ = model.forward(np.array([prompt]), last_only=True)
        np.testing.assert_allclose(together[i], reference[0, -1], rtol=1e-4, atol=1e-4)


def test_the_chunks_do_not_change_the_bits():
    model = tiny_chat_model(max_seq_len=96)
    prompts = [model.tokenizer.encode(t * 2) for t in TEXTS]          # up to 70 ids: 3 blocks
    whole, cache = prefill(model, prompts, 0)
    for chunk in (1, 5, 32, 40):
        cut, other = prefill(model, prompts, chunk)
        np.testing.assert_array_equal(cut, whole)
        for row in range(len(prompts)):
            for a, b in zip(keys_of(cache, row), keys_of(other, row)):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kept", [13, 20])
def test_a_reused_prefix_gives_the_bits_of_computing_it(kept):
    model = tiny_chat_model(max_seq_len=64)
    first = model.tokenizer.encode("the same opening words, then one ending")
    second = model.tokenizer.encode("the same opening words, then another")
    _, cache = prefill(model, [first], 4)              # row 0 holds first's keys
    reused, cache = prefill(model, [second], 7, cache=cache, kept=kept)   # copied, then fed
    fresh, clean = prefill(model, [second], 4)
    np.testing.assert_array_equal(reused[0], fresh[0])
    for a, b in zip(keys_of(cache, 0), keys_of(clean, 0)):
        np.testing.assert_array_equal(a, b)


def test_gpt2_layers_learned_positions_and_biases_give_the_model_logits():
    """LayerNorm, GELU, biases everywhere, learned positions, no RoPE: the other plain layer."""
    from serve_models import byte_tokenizer

    from glassformer.models import gpt2
    from glassformer.models.model import Model
    tokenizer = byte_tokenizer()
    cfg = gpt2.GPT2Config(vocab_size=tokenizer.vocab_size, max_seq_len=96, n_layer=2,
                          n_head=4, d_model=32)
    model = Model(cfg, gpt2.FAMILY.init_params(cfg, np.random.default_rng(1)), tokenizer)
    prompts = [tokenizer.encode(t * 2) for t in TEXTS]
    together, _ = prefill(model, prompts, 5)
    for i, prompt in enumerate(prompts):
        reference, _ = model.forward(np.array([prompt]), last_only=True)
        np.testing.assert_allclose(together[i], reference[0, -1], rtol=1e-4, atol=1e-4)
