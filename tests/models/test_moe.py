"""The moe family (LLaMA with QK-norm and sparse MoE MLPs): shapes, dtypes and param names of a
mixed dense/sparse stack, a float64 spot gradcheck of every parameter of a whole model (router,
experts, QK-norm, the dense layer) with left padding, and cached decoding equal to a full
recompute. Parity with transformers: tests/models/test_moe_hf_parity.py."""
import numpy as np
import pytest

from glassformer.generate.generate import generate
from glassformer.gradcheck import numeric_gradient, relative_error
from glassformer.models import moe
from glassformer.models.model import Model

GRADCHECK_TOL = 1e-6      # float64 central differences agree to ~1e-9 when the backward is right
SPOTS = 3                 # elements checked per parameter
CACHE_ATOL = 1e-5         # cached vs full recompute: same math, different summation order


def tiny(**overrides):
    base = dict(vocab_size=11, max_seq_len=16, n_layer=2, n_head=4, n_kv_head=2, d_model=8,
                d_ff=12, n_experts=4, experts_per_token=2, expert_d_ff=6, sparse_step=2)
    return moe.MoeLlamaConfig(**{**base, **overrides})


def perturbed(params, rng, dtype):
    """Weights larger than init and norm gains away from 1, so every path carries gradient."""
    out = {}
    for key, value in params.items():
        noise = rng.standard_normal(value.shape) * (0.3 if value.ndim == 1 else 0.0)
        out[key] = (value * (1.0 if value.ndim == 1 else 10.0) + noise).astype(dtype)
    return out


def test_dense_and_sparse_layers_and_their_params():
    cfg = tiny()
    params = moe.FAMILY.init_params(cfg, np.random.default_rng(0))
    assert cfg.dense_layers() == (0,)                       # (i + 1) % 2 != 0: layer 0
    assert params["blocks.0.mlp.w_up"].shape == (8, 12)     # dense (C, F)
    assert params["blocks.1.mlp.router"].shape == (8, 4)    # (C, E)
    assert params["blocks.1.mlp.experts.w_down"].shape == (4, 6, 8)   # (E, F_e, C)
    assert params["blocks.1.attn.q_norm"].shape == (2,)     # per head: (D,)
    assert list(params) == list(moe.FAMILY.param_shapes(cfg))
    logits, _ = moe.FAMILY.forward(params, np.array([[1, 2, 3]]), cfg)
    assert logits.shape == (1, 3, 11) and logits.dtype == np.float32


@pytest.mark.parametrize("overrides", [
    dict(),                                                          # Qwen3-MoE-like
    dict(qk_norm="proj", sparse_step=1, norm_topk_prob=False, tie_embeddings=True),  # OLMoE
])
def test_float64_spot_gradcheck_of_every_parameter(overrides):
    cfg = tiny(**overrides)
    rng = np.random.default_rng(1)
    params = perturbed(moe.FAMILY.init_params(cfg, rng), rng, np.float64)
    ids = rng.integers(0, 11, (2, 4))
    key_mask = np.array([[True] * 4, [False, True, True, True]])          # left padding
    positions = np.maximum(np.cumsum(key_mask, axis=1) - 1, 0)
    dlogits = rng.standard_normal((2, 4, 11))
    _, ctx = moe.FAMILY.forward(params, ids, cfg, key_mask=key_mask, positions=positions)
    grads = moe.FAMILY.backward(dlogits, ctx)
    assert set(grads) == set(params)
    for key, grad in grads.items():
        flat = rng.choice(grad.size, size=min(SPOTS, grad.size), replace=False)
        spots = np.unravel_index(flat, grad.shape)

        def forward(inputs, key=key, spots=spots):
            nudged = params[key].copy()
            nudged[spots] += inputs["delta"]
            return moe.FAMILY.forward({**params, key: nudged}, ids, cfg, key_mask=key_mask,
                                      positions=positions)

        numeric = numeric_gradient(forward, {"delta": np.zeros(len(flat))}, "delta", dlogits)
        if np.abs(numeric).max() < 1e-8:  # an expert no token chose, or a spot without effect
            assert np.abs(grad[spots]).max() < 1e-8, key
            continue
        assert relative_error(grad[spots], numeric) < GRADCHECK_TOL, key


def test_cached_decoding_equals_full_recompute():
    cfg = tiny(qk_norm="proj", sparse_step=1)
    rng = np.random.default_rng(3)
    model = Model(cfg, perturbed(moe.FAMILY.init_params(cfg, rng), rng, np.float32))
    ids = rng.integers(0, 11, (2, 4))
    mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1]])
    cached = list(generate(model, ids, max_new_tokens=6, temperature=0.0, attention_mask=mask))
    full = list(generate(model, ids, max_new_tokens=6, temperature=0.0, attention_mask=mask,
                         use_cache=False))
    np.testing.assert_array_equal(np.stack(cached), np.stack(full))
    cache = model.new_cache(1)
    model.forward(ids[:1, :3], kv_cache=cache)
    cache.advance(3)
    step, _ = model.forward(ids[:1, 3:4], kv_cache=cache)
    whole, _ = model.forward(ids[:1, :4])
    np.testing.assert_allclose(step[:, -1], whole[:, -1], atol=CACHE_ATOL)
