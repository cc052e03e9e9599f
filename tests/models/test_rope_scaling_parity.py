"""Scaled RoPE (linear, dynamic NTK, llama3, yarn) matches transformers past the original context:
random-init LlamaForCausalLM models written with save_pretrained and read with load_pretrained
give the same logits at every position of a sequence longer than the pretraining context, and
our export of them loads in transformers as the same model."""
import numpy as np
import pytest

from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.ops.rope_scaling import RopeScaling, rope_frequencies

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF_ATOL = 1e-4       # the bar; HF forms its angles in float32, we in float64
V = 97
ORIGINAL = 32        # the "pretraining" context the scaling stretches
T = 100              # the test sequence: past ORIGINAL, and past 2 x ORIGINAL
THETA = 100.0        # a small base, so D = 16 spans fast, blended and slow pairs

SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn_options": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 8.0, "beta_slow": 2.0,
                     "attention_factor": 1.3, "truncate": False,
                     "original_max_position_embeddings": ORIGINAL},
}


def hf_llama(rope: dict):
    # dynamic NTK scales past max_position_embeddings; the others keep the long context there
    context = ORIGINAL if rope["rope_type"] == "dynamic" else 4 * ORIGINAL
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=context,
                                   rope_parameters={**rope, "rope_theta": THETA},
                                   initializer_range=0.2, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.slow
@pytest.mark.parametrize("name", SCALINGS)
def test_scaled_rope_logits_match_transformers_past_the_original_context(name, tmp_path):
    reference = hf_llama(SCALINGS[name])
    reference.save_pretrained(tmp_path, safe_serialization=True)
    model = load_pretrained(tmp_path)
    assert model.cfg.rope_type == SCALINGS[name]["rope_type"]
    ids = np.random.default_rng(0).integers(0, V, (1, T))
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    ours = model(ids)
    assert np.abs(ours - expected).max() < HF_ATOL
    # and back: our export is the same model to transformers
    save_pretrained(model, tmp_path / "export")
    exported = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "export").eval()
    with torch.no_grad():
        again = exported(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(again - expected).max() < HF_ATOL
    # the scaling is not a no-op here: plain RoPE gives other logits past the original context
    plain = hf_llama({"rope_type": "default"})
    with torch.no_grad():
        unscaled = plain(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(unscaled[0, ORIGINAL:] - expected[0, ORIGINAL:]).max() > 100 * HF_ATOL


@pytest.mark.parametrize("name", ["linear", "llama3", "yarn", "yarn_options"])
def test_inv_freq_equals_transformers(name):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    reference = hf_llama(SCALINGS[name])
    expected, expected_factor = ROPE_INIT_FUNCTIONS[SCALINGS[name]["rope_type"]](
        reference.config, "cpu")
    cfg = load_cfg(reference)
    inv_freq, factor = rope_frequencies(16, theta=THETA, scaling=cfg.rope_scaling())
    np.testing.assert_allclose(inv_freq, expected.numpy(), rtol=1e-6)
    assert factor == pytest.approx(expected_factor)


def test_dynamic_theta_grows_only_past_the_original_context():
    scaling = RopeScaling("dynamic", 4.0, original_max_len=ORIGINAL)
    plain, _ = rope_frequencies(16, theta=THETA)
    within, _ = rope_frequencies(16, theta=THETA, scaling=scaling, seq_len=ORIGINAL)
    past, _ = rope_frequencies(16, theta=THETA, scaling=scaling, seq_len=2 * ORIGINAL)
    np.testing.assert_array_equal(within, plain)
    assert (past[1:] < plain[1:]).all() and past[0] == plain[0]


def load_cfg(reference):
    from glassformer.io.hf_config import config_from_hf

    return config_from_hf(reference.config.to_dict())
