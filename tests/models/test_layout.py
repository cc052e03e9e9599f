"""The decoding layout (models/layout.py, blocks/packed.py): a loaded model's weights packed and
row-major keep every key, value and number; the blocks use the one product only while the weights
still lie packed."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.packed import pack_columns, packed_whole
from glassformer.generate.generate import generate
from glassformer.models import llama
from glassformer.models.family import CAUSAL
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model
from glassformer.models.registry import arch_of, family
from tests.models.test_family import CONFIGS as EVERY_FAMILY
from tests.models.test_family import TINY

CONFIGS = [cfg for cfg in EVERY_FAMILY if family(arch_of(cfg)).kind == CAUSAL]


def loaded_params(cfg) -> dict:
    """Fresh params with every matrix a transposed view, as a checkpoint's (out, in) loads."""
    params = family(arch_of(cfg)).init_params(cfg, np.random.default_rng(0))
    return {key: np.ascontiguousarray(value.T).T if value.ndim == 2 else value
            for key, value in params.items()}


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_layout_keeps_keys_values_and_numbers(cfg):
    before = loaded_params(cfg)
    after = dict(before)
    lay_out_for_decoding(after)
    assert list(after) == list(before)
    assert all(np.array_equal(after[key], before[key]) for key in before)
    fam = family(arch_of(cfg))
    ids = np.array([[1, 4, 2, 9], [5, 0, 7, 7]])
    logits_before, ctx_before = fam.forward(before, ids, cfg)
    logits_after, ctx_after = fam.forward(after, ids, cfg)
    np.testing.assert_allclose(logits_after, logits_before, rtol=1e-5, atol=1e-6)
    dlogits = np.random.default_rng(1).standard_normal(logits_before.shape).astype(np.float32)
    grads_before, grads_after = fam.backward(dlogits, ctx_before), fam.backward(dlogits, ctx_after)
    assert list(grads_after) == list(grads_before)
    for key in grads_before:
        np.testing.assert_allclose(grads_after[key], grads_before[key], rtol=1e-4, atol=1e-6)
    tokens = [list(generate(Model(cfg, params), ids, max_new_tokens=4, temperature=0.0))
              for params in (before, after)]
    np.testing.assert_array_equal(tokens[0], tokens[1])


def test_llama_layout_packs_qkv_and_gate_up_row_major():
    params = loaded_params(llama.LlamaConfig(**TINY, n_kv_head=1, tie_embeddings=False))
    lay_out_for_decoding(params)
    attn = [params[f"blocks.0.attn.w{name}"] for name in "qkv"]
    assert packed_whole(attn).shape == (8, 8 + 4 + 4)
    assert packed_whole([params["blocks.1.mlp.w_gate"], params["blocks.1.mlp.w_up"]]) is not None
    assert params["blocks.0.attn.wo"].flags.c_contiguous and params["lm_head"].flags.c_contiguous
    assert params["blocks.0.mlp.w_down"].flags.f_contiguous     # narrowing: left as loaded


def test_packed_whole_needs_every_part_in_place_and_in_order():
    a, b, c = pack_columns([np.ones((3, 2), np.float32)] * 3)
    assert packed_whole([a, b, c]) is a.base
    assert packed_whole([a, c]) is None and packed_whole([b, a, c]) is None
    assert packed_whole([a, b, c.copy()]) is None       # a param replaced (an optimizer step)
    assert packed_whole([np.ones((3, 2), np.float32)] * 2) is None
