"""The residual stream inspect rebuilds is the forward's own, to the bit: in a pre-norm model the
final norm of the rebuilt last state equals what the LM head read; in a post-norm model the
stream ends at the model's output."""
import numpy as np
import pytest

from glassformer.blocks.names import sub_params
from glassformer.blocks.norm import norm_forward
from glassformer.models import bert, gpt2, llama
from glassformer.models.model import Model
from glassformer.viewer import inspect


@pytest.mark.parametrize("family, cfg", [
    (gpt2, gpt2.GPT2Config(vocab_size=20, n_layer=3, n_head=2, d_model=16, max_seq_len=16)),
    (llama, llama.LlamaConfig(vocab_size=20, n_layer=3, n_head=4, n_kv_head=2, d_model=16,
                              max_seq_len=16)),
])
def test_pre_norm_stream_is_bit_exact(family, cfg):
    model = Model(cfg, family.init_params(cfg, np.random.default_rng(0)))
    seen = inspect(model, np.random.default_rng(1).integers(0, 20, (2, 9)))
    normed, _ = norm_forward(sub_params(model.params, "norm_f."), seen.residual[-1],
                             cfg.block_config())
    assert np.array_equal(normed, seen.hidden_states[-1])
    assert len(seen.residual) == cfg.n_layer + 1
    assert seen.residual_norms().shape == (cfg.n_layer + 1, 2, 9)


def test_post_norm_stream_ends_at_the_models_output():
    cfg = bert.BertConfig(vocab_size=20, n_layer=3, n_head=2, d_model=16, max_seq_len=16)
    model = Model(cfg, bert.init_params(cfg, np.random.default_rng(0)))
    ids = np.random.default_rng(1).integers(0, 20, (1, 7))
    seen = inspect(model, ids)
    assert np.array_equal(seen.residual[-1], model(ids))
    assert all(x.shape == (1, 7, 16) for x in seen.hidden_states)
