"""LLaMA family: shapes and dtypes, float64 spot gradcheck of every parameter, cached decoding,
config round trips, and every gradient against torch autograd on an HF LlamaForCausalLM with
grouped KV heads and the same weights (config.json conversion: tests/io/test_hf_config.py)."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVLayout
from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.gradcheck import numeric_gradient, relative_error
from glassformer.io import hf_names
from glassformer.io.hf_config import config_from_hf
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.train.step import loss_and_grads

GRADCHECK_TOL = 1e-6      # float64 central differences agree to ~1e-9 when the backward is right
SPOTS = 4                 # elements checked per parameter
# float32, ~30 ops deep, each rounding at ~1e-7: the bar is 1e-5 relative.
TORCH_RTOL = 1e-5
GRAD_FLOOR = 1e-6         # relative to max(|ref|, floor): tiny grads are compared absolutely
CACHE_ATOL = 1e-5         # cached vs full recompute: same math, different summation order


def tiny(**overrides):
    base = dict(vocab_size=11, max_seq_len=8, n_layer=2, n_head=4, n_kv_head=2, d_model=8,
                d_ff=12)
    return llama.LlamaConfig(**{**base, **overrides})


def perturbed(params, rng, dtype):
    """Weights larger than init and norm gains away from 1, so every path carries gradient."""
    out = {}
    for key, value in params.items():
        noise = rng.standard_normal(value.shape) * (0.3 if value.ndim == 1 else 0.0)
        out[key] = (value * (1.0 if value.ndim == 1 else 10.0) + noise).astype(dtype)
    return out


def test_forward_shapes_dtypes_and_param_names():
    cfg = tiny(qkv_bias=True)
    params = llama.init_params(cfg, np.random.default_rng(0))
    logits, _ = llama.forward(params, np.array([[1, 2, 3], [4, 5, 6]]), cfg)
    assert logits.shape == (2, 3, 11) and logits.dtype == np.float32
    assert {k: v.shape for k, v in params.items()} == llama.FAMILY.param_shapes(cfg)
    assert params["blocks.0.attn.wk"].shape == (8, 4)        # (C, K*D) = (8, 2*2)
    assert "pos_emb" not in params and "blocks.0.mlp.w_gate" in params
    assert list(params) == list(llama.param_shapes(cfg))     # init's order is the table's
    assert llama.FAMILY.kv_layout(cfg) == KVLayout(heads=2, key_dim=2, value_dim=2)


def test_default_d_ff_is_two_thirds_of_four_c_rounded():
    assert llama.LlamaConfig(d_model=128).hidden == 344     # 8 * 128 / 3 = 341.3 -> 344
    assert llama.LlamaConfig(d_model=128, d_ff=100).hidden == 100


@pytest.mark.parametrize("overrides", [
    dict(qkv_bias=True, out_bias=True),                  # biases, untied, GQA (K=2)
    dict(tie_embeddings=True, n_kv_head=1, head_dim=4),  # tied, multi-query, D != C / H
])
def test_float64_spot_gradcheck_of_every_parameter(overrides):
    cfg = tiny(**overrides)
    rng = np.random.default_rng(1)
    params = perturbed(llama.init_params(cfg, rng), rng, np.float64)
    ids = rng.integers(0, 11, (2, 5))
    key_mask = np.array([[True] * 5, [False, False, True, True, True]])   # left padding
    positions = np.maximum(np.cumsum(key_mask, axis=1) - 1, 0)
    dlogits = rng.standard_normal((2, 5, 11))
    _, ctx = llama.forward(params, ids, cfg, key_mask=key_mask, positions=positions)
    grads = llama.backward(dlogits, ctx)
    assert set(grads) == set(params)
    for key, grad in grads.items():
        flat = rng.choice(grad.size, size=min(SPOTS, grad.size), replace=False)
        spots = np.unravel_index(flat, grad.shape)

        def forward(inputs, key=key, spots=spots):
            nudged = params[key].copy()
            nudged[spots] += inputs["delta"]
            return llama.forward({**params, key: nudged}, ids, cfg, key_mask=key_mask,
                                 positions=positions)

        numeric = numeric_gradient(forward, {"delta": np.zeros(len(flat))}, "delta", dlogits)
        if np.abs(numeric).max() < 1e-8:  # key biases: softmax ignores a per-row constant
            assert np.abs(grad[spots]).max() < 1e-8, key
            continue
        assert relative_error(grad[spots], numeric) < GRADCHECK_TOL, key


def test_cached_decoding_equals_full_recompute_with_gqa_and_padding():
    cfg = tiny(max_seq_len=16)
    rng = np.random.default_rng(3)
    model = Model(cfg, perturbed(llama.init_params(cfg, rng), rng, np.float32))
    ids = rng.integers(0, 11, (2, 4))
    mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1]])
    cached = list(generate(model, ids, max_new_tokens=8, temperature=0.0, attention_mask=mask))
    full = list(generate(model, ids, max_new_tokens=8, temperature=0.0, attention_mask=mask,
                         use_cache=False))
    np.testing.assert_array_equal(np.stack(cached), np.stack(full))
    # logits of the newest token, cached vs recomputed over the whole sequence
    cache = model.new_cache(1)
    model.forward(ids[:1, :3], kv_cache=cache)
    cache.advance(3)
    step, _ = model.forward(ids[:1, 3:4], kv_cache=cache)
    whole, _ = model.forward(ids[:1, :4])
    np.testing.assert_allclose(step[:, -1], whole[:, -1], atol=CACHE_ATOL)


def test_config_round_trips():
    cfg = tiny(qkv_bias=True, tie_embeddings=True, rope_theta=500.0)
    assert llama.LlamaConfig.from_dict(cfg.to_dict()) == cfg


def test_bad_input_is_a_clear_error():
    cfg = tiny()
    params = llama.init_params(cfg, np.random.default_rng(0))
    with pytest.raises(GlassformerError, match="past the context of max_seq_len=8"):
        llama.forward(params, np.zeros((1, 9), dtype=np.int64), cfg)
    with pytest.raises(GlassformerError, match="must be a multiple of n_kv_head=3"):
        tiny(n_kv_head=3)
    with pytest.raises(GlassformerError, match="unknown LlamaConfig keys"):
        llama.LlamaConfig.from_dict({"arch": "llama", "n_embd": 8})


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_every_gradient_matches_torch_autograd_on_hf_llama():
    torch.manual_seed(0)
    hf_cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        initializer_range=0.1)
    model = transformers.LlamaForCausalLM(hf_cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)  # norm gains away from 1
    cfg = config_from_hf(hf_cfg.to_dict())
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = hf_params(cfg, state)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 64, (3, 16)), rng.integers(0, 64, (3, 16))
    loss, grads = loss_and_grads(llama, params, cfg, x, y, rng=None)
    logits = model(torch.from_numpy(x)).logits
    torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64),
                                                   torch.from_numpy(y).reshape(-1))
    torch_loss.backward()
    theirs = hf_params(cfg, {k: p.grad.numpy() for k, p in model.named_parameters()})
    assert loss == pytest.approx(torch_loss.item(), rel=TORCH_RTOL)
    assert set(grads) == set(theirs)
    for key, grad in grads.items():
        err = np.abs(grad - theirs[key]).max() / max(np.abs(theirs[key]).max(), GRAD_FLOOR)
        assert err < TORCH_RTOL, (key, err)


def hf_params(cfg, state):
    """An HF LLaMA state dict (or its grads) -> glassformer names and layouts."""
    table = hf_names.hf_keys_by_table_name("llama", state)
    return hf_names.to_glassformer("llama", cfg, {name: state[key] for name, key in table.items()})
