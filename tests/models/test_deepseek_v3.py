"""DeepSeek-V3 family: shapes and dtypes, float64 spot gradcheck of every parameter (dense and MoE
layers), decoding with the latent cache equal to decoding without it, the cache's bytes per
token, config round trips, bad input (transformers parity: tests/models/test_deepseek_v3_parity.py)."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVLayout
from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.gradcheck import numeric_gradient, relative_error
from glassformer.models import deepseek_v3
from glassformer.models.deepseek_v3 import FAMILY, DeepseekV3Config
from glassformer.models.model import Model

GRADCHECK_TOL = 1e-6      # float64 central differences agree to ~1e-9 when the backward is right
SPOTS = 3                 # elements checked per parameter
CACHE_ATOL = 1e-5         # the brief's bar: cached vs full recompute, float32 logits


def tiny(**overrides):
    base = dict(vocab_size=11, max_seq_len=16, n_layer=2, n_head=3, d_model=12, d_ff=10,
                q_lora_rank=5, kv_lora_rank=6, qk_nope_head_dim=3, qk_rope_head_dim=4,
                v_head_dim=2)
    return DeepseekV3Config(**{**base, **overrides})


def perturbed(params, rng, dtype):
    """Weights larger than init and norm gains away from 1, so every path carries gradient."""
    out = {}
    for key, value in params.items():
        noise = rng.standard_normal(value.shape) * (0.3 if value.ndim == 1 else 0.0)
        out[key] = (value * (1.0 if value.ndim == 1 else 10.0) + noise).astype(dtype)
    return out


def test_forward_shapes_dtypes_and_param_names():
    cfg = tiny()
    params = FAMILY.init_params(cfg, np.random.default_rng(0))
    logits, _ = FAMILY.forward(params, np.array([[1, 2, 3], [4, 5, 6]]), cfg)
    assert logits.shape == (2, 3, 11) and logits.dtype == np.float32
    assert list(params) == list(FAMILY.param_shapes(cfg))    # init's order is the table's
    assert params["blocks.0.attn.wkv_a"].shape == (12, 6 + 4)       # (C, R + Dr)
    assert params["blocks.0.attn.wkv_b"].shape == (6, 3 * (3 + 2))  # (R, H (Dn + Dv))
    assert "blocks.0.attn.wq" not in params and "blocks.1.attn.q_norm.w" in params
    plain = tiny(q_lora_rank=None)
    assert FAMILY.param_shapes(plain)["blocks.0.attn.wq"] == (12, 3 * (3 + 4))
    assert FAMILY.kv_layout(cfg) == KVLayout(heads=1, key_dim=6, value_dim=4)


@pytest.mark.parametrize("overrides", [
    dict(),                                                          # q_lora, interleaved pairs
    dict(q_lora_rank=None, rope_interleave=False, tie_embeddings=True, rope_type="yarn",
         rope_factor=4.0, rope_original_max_seq_len=4, rope_mscale_all_dim=1.0),
    dict(n_layer=3, n_experts=4, experts_per_token=2, expert_d_ff=3, n_shared_experts=1,
         first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.5),
], ids=["q-lora", "plain-q-yarn-tied", "moe"])
def test_float64_spot_gradcheck_of_every_parameter(overrides):
    cfg = tiny(**overrides)
    rng = np.random.default_rng(1)
    params = perturbed(FAMILY.init_params(cfg, rng), rng, np.float64)
    ids = rng.integers(0, 11, (2, 5))
    key_mask = np.array([[True] * 5, [False, False, True, True, True]])   # left padding
    positions = np.maximum(np.cumsum(key_mask, axis=1) - 1, 0)
    dlogits = rng.standard_normal((2, 5, 11))
    _, ctx = FAMILY.forward(params, ids, cfg, key_mask=key_mask, positions=positions)
    grads = FAMILY.backward(dlogits, ctx)
    assert set(grads) == set(params)
    for key, grad in grads.items():
        flat = rng.choice(grad.size, size=min(SPOTS, grad.size), replace=False)
        spots = np.unravel_index(flat, grad.shape)

        def forward(inputs, key=key, spots=spots):
            nudged = params[key].copy()
            nudged[spots] += inputs["delta"]
            return FAMILY.forward({**params, key: nudged}, ids, cfg, key_mask=key_mask,
                                  positions=positions)

        numeric = numeric_gradient(forward, {"delta": np.zeros(len(flat))}, "delta", dlogits)
        assert relative_error(grad[spots], numeric) < GRADCHECK_TOL, key


def test_decoding_with_the_latent_cache_equals_decoding_without_it():
    cfg = tiny()
    rng = np.random.default_rng(3)
    model = Model(cfg, perturbed(FAMILY.init_params(cfg, rng), rng, np.float32))
    ids = rng.integers(0, 11, (2, 4))
    mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1]])
    cached = list(generate(model, ids, max_new_tokens=8, temperature=0.0, attention_mask=mask))
    full = list(generate(model, ids, max_new_tokens=8, temperature=0.0, attention_mask=mask,
                         use_cache=False))
    np.testing.assert_array_equal(np.stack(cached), np.stack(full))
    # logits at every step, cached vs recomputed over the whole sequence
    cache = model.new_cache(1)
    model.forward(ids[:1, :2], kv_cache=cache)
    cache.advance(2)
    for end in (3, 4):
        step, _ = model.forward(ids[:1, end - 1:end], kv_cache=cache)
        cache.advance(1)
        whole, _ = model.forward(ids[:1, :end])
        np.testing.assert_allclose(step[:, -1], whole[:, -1], atol=CACHE_ATOL)


def test_the_cache_keeps_the_latent_and_the_rope_key_only():
    cfg = tiny()
    model = Model(cfg, FAMILY.init_params(cfg, np.random.default_rng(0)))
    cache = model.new_cache(2)
    assert cache.k[0].shape == (2, 1, 16, 6) and cache.v[0].shape == (2, 1, 16, 4)
    # float32, L = 2 layers, R + Dr = 6 + 4 floats per layer: 80 bytes per token (MHA with
    # these heads would keep H (Dn + Dr) + H Dv = 27 floats per layer)
    assert cache.nbytes_per_token() == 2 * 4 * (6 + 4)


def test_the_viewer_reads_mla_and_moe_layers():
    """inspect() (the viewer's and explain's reader) gets each layer's (B, H, T, S) weights and a
    residual stream that ends where the final norm began."""
    from glassformer.ops.rms_norm import rms_norm_forward
    from glassformer.viewer.inspection import inspect
    cfg = tiny(n_layer=3, n_experts=4, experts_per_token=2, expert_d_ff=3,
               first_k_dense_replace=1, n_group=2, topk_group=1)
    rng = np.random.default_rng(4)
    model = Model(cfg, perturbed(FAMILY.init_params(cfg, rng), rng, np.float32))
    seen = inspect(model, np.array([1, 2, 3, 4, 5]))
    assert [a.shape for a in seen.attentions] == [(1, 3, 5, 5)] * 3
    np.testing.assert_allclose(seen.attentions[0].sum(-1), 1.0, rtol=1e-6)
    final, _ = rms_norm_forward(seen.residual[-1], model.params["norm_f.w"], eps=cfg.norm_eps)
    np.testing.assert_allclose(final, seen.hidden_states[-1], atol=1e-5)
    # the page's per-head steps (glassformer show) read the MLA layer's (B, H, T, S) layout
    from glassformer.viewer.page_data import head_steps
    steps = head_steps(seen, 2, 1)
    np.testing.assert_allclose(steps["weights"], seen.attentions[2][0, 1], atol=1e-4)


def test_config_round_trips():
    cfg = tiny(rope_type="yarn", rope_factor=2.0, rope_original_max_seq_len=8,
               rope_mscale_all_dim=0.5)
    assert DeepseekV3Config.from_dict(cfg.to_dict()) == cfg
    assert cfg.block_config().mla.mscale_all_dim == 0.5


def test_bad_input_is_a_clear_error():
    with pytest.raises(GlassformerError, match="even qk_rope_head_dim"):
        tiny(qk_rope_head_dim=3)
    with pytest.raises(GlassformerError, match="kv_lora_rank must be an integer >= 1"):
        tiny(kv_lora_rank=0)
    with pytest.raises(GlassformerError, match="unknown DeepseekV3Config keys"):
        DeepseekV3Config.from_dict({"arch": "deepseek_v3", "n_kv_heads": 2})
    with pytest.raises(GlassformerError, match="n_kv_head does not apply to DeepSeek-V3's latent"):
        tiny(n_kv_head=1)
    assert tiny(n_kv_head=3).block_config().mla is not None      # = n_head: the same model
    cfg = tiny()
    params = FAMILY.init_params(cfg, np.random.default_rng(0))
    with pytest.raises(GlassformerError, match="past the context of max_seq_len=16"):
        FAMILY.forward(params, np.zeros((1, 17), dtype=np.int64), cfg)
    assert deepseek_v3.FAMILY.name == "deepseek_v3"
