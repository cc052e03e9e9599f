"""Qwen3-MoE with mlp_only_layers and decoder_sparse_step (issue 49) against transformers' own
Qwen3MoeForCausalLM: 4 layers, step 2 makes layers 1 and 3 sparse, mlp_only_layers=[1] keeps
layer 1 dense, so only layer 3 routes. A random model written by save_pretrained loads with the
same logits (within 1e-4) and greedy continuation, the dense layer's tensors where transformers
keeps them; glassformer's export loads back in transformers with the same logits."""
from __future__ import annotations

import json

import numpy as np
import pytest

from glassformer.io.pretrained import load_pretrained, save_pretrained

from tests.models.hf_check import assert_logits_and_greedy_match
from tests.models.test_moe_hf_parity import prompts   # the same left-padded pair of rows

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF_ATOL = 1e-4        # the bar for logits
EXPORT_RTOL = 1e-5    # the same float32 weights on both sides, relative to the largest logit
V = 61   # test_moe_hf_parity.py's vocabulary: its prompts() are in range
INIT_STD = 0.2        # as test_moe_hf_parity.py: logits and router scores far apart
CONFIG = dict(vocab_size=V, hidden_size=24, intermediate_size=18, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=10,
              max_position_embeddings=64, initializer_range=INIT_STD, bos_token_id=None,
              eos_token_id=None, pad_token_id=None, rms_norm_eps=1e-6, num_experts=5,
              num_experts_per_tok=3, moe_intermediate_size=7, norm_topk_prob=True,
              decoder_sparse_step=2, mlp_only_layers=[1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(the transformers model, its save_pretrained folder)."""
    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(**CONFIG)
    config._experts_implementation = "eager"   # odd widths: transformers' loop over experts
    reference = transformers.Qwen3MoeForCausalLM(config)
    with torch.no_grad():
        for p in reference.parameters():
            if p.ndim == 1:   # norm gains off 1
                p.add_(torch.randn_like(p) * 0.1)
    reference.eval()
    folder = tmp_path_factory.mktemp("qwen3_moe_mlp_only")
    reference.save_pretrained(folder)
    return reference, folder


def test_the_layers_are_dense_and_sparse_as_in_transformers(saved):
    reference, folder = saved
    sparse = [i for i, layer in enumerate(reference.model.layers) if hasattr(layer.mlp, "experts")]
    assert sparse == [3]
    model = load_pretrained(folder)
    assert model.cfg.dense_layers() == (0, 1, 2)
    assert "blocks.1.mlp.w_gate" in model.params and "blocks.1.mlp.router" not in model.params
    assert "blocks.3.mlp.router" in model.params and "blocks.3.mlp.w_gate" not in model.params
    np.testing.assert_array_equal(model.params["blocks.1.mlp.w_up"],
                                  reference.model.layers[1].mlp.up_proj.weight.detach().numpy().T)


def test_logits_and_greedy_continuation_match(saved):
    reference, folder = saved
    ids, mask = prompts()
    assert_logits_and_greedy_match(load_pretrained(folder), reference, ids, mask, atol=HF_ATOL,
                                   new_tokens=8)


def test_export_keeps_mlp_only_layers(saved, tmp_path):
    _, folder = saved
    model = load_pretrained(folder)
    save_pretrained(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["mlp_only_layers"] == [1] and config["decoder_sparse_step"] == 2
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path,
                                                           experts_implementation="eager").eval()
    ids, _ = prompts()
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(model(ids) - theirs).max() <= EXPORT_RTOL * np.abs(theirs).max()
