"""BERT family: shapes and dtypes, float64 spot gradcheck of the encoder and the MLM head,
pooling helpers, config round trips, and hidden states / MLM logits / gradients against a
random-init HF BertForMaskedLM with padding."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import numeric_gradient, relative_error
from glassformer.gradcheck.cases import find_case
from glassformer.gradcheck.core import run_case
from glassformer.io import hf_names
from glassformer.io.hf_config import config_from_hf
from glassformer.models import bert
from glassformer.models.model import Model

GRADCHECK_TOL = 1e-6   # float64 central differences agree to ~1e-9 when the backward is right
SPOTS = 4              # elements checked per parameter
HF_ATOL = 1e-4         # the bar for hidden states (they agree to ~1e-6)
TORCH_RTOL = 1e-5      # float32 gradients, relative to max(|ref|, GRAD_FLOOR)
GRAD_FLOOR = 1e-6
# Key-bias grads are zero in exact arithmetic (softmax ignores a constant added to a whole row
# of scores): both sides are float32 noise, compared to the model's gradient scale.
ZERO_GRAD_ATOL = 1e-5


def tiny(**overrides):
    base = dict(vocab_size=11, max_seq_len=8, n_types=2, n_layer=2, n_head=2, d_model=8,
                d_ff=12, mlm_head=True)
    return bert.BertConfig(**{**base, **overrides})


def perturbed(params, rng, dtype):
    """Weights larger than init, biases and norm gains random, so every path has gradient."""
    return {key: (value * (1.0 if value.ndim == 1 else 10.0)
                  + rng.standard_normal(value.shape) * (0.3 if value.ndim == 1 else 0.0)
                  ).astype(dtype) for key, value in params.items()}


def test_forward_shapes_dtypes_and_param_names():
    cfg = tiny()
    params = bert.init_params(cfg, np.random.default_rng(0))
    hidden, _ = bert.encoder_forward(params, np.array([[1, 2, 3], [4, 5, 6]]), cfg)
    assert hidden.shape == (2, 3, 8) and hidden.dtype == np.float32
    logits, _ = bert.mlm_forward(params, hidden, cfg)
    assert logits.shape == (2, 3, 11) and logits.dtype == np.float32
    assert {k: v.shape for k, v in params.items()} == bert.FAMILY.param_shapes(cfg)
    # with the MLM head the model gives logits; without it (BertModel, MiniLM) hidden states
    out = Model(cfg, params)(np.array([[1, 2, 3]]), attention_mask=np.array([[1, 1, 0]]))
    assert out.shape == (1, 3, 11)
    bare = tiny(mlm_head=False)
    encoder_only = {k: v for k, v in params.items() if not k.startswith("mlm.")}
    out = Model(bare, encoder_only)(np.array([[1, 2, 3]]), attention_mask=np.array([[1, 1, 0]]))
    assert out.shape == (1, 3, 8)


def test_family_forward_and_backward_compose_encoder_and_head():
    """FAMILY's pair (what training calls) equals encoder + head by hand, tok_emb summed."""
    cfg = tiny()
    rng = np.random.default_rng(3)
    params = perturbed(bert.init_params(cfg, rng), rng, np.float64)
    ids = rng.integers(0, 11, (2, 5))
    logits, ctx = bert.FAMILY.forward(params, ids, cfg)
    hidden, _ = bert.encoder_forward(params, ids, cfg)
    np.testing.assert_array_equal(logits, bert.mlm_forward(params, hidden, cfg)[0])
    dlogits = rng.standard_normal(logits.shape)
    grads = bert.FAMILY.backward(dlogits, ctx)
    head_grads, dhidden = bert.mlm_backward(dlogits, ctx.mlm)
    body_grads = bert.encoder_backward(dhidden, ctx)
    np.testing.assert_allclose(grads["tok_emb"], body_grads["tok_emb"] + head_grads["tok_emb"])
    assert set(grads) == set(params)


def test_float64_spot_gradcheck_of_encoder_and_mlm_head():
    cfg = tiny()
    rng = np.random.default_rng(1)
    params = perturbed(bert.init_params(cfg, rng), rng, np.float64)
    ids = rng.integers(0, 11, (2, 5))
    types = np.array([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]])
    key_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])       # right padding, as BERT
    dlogits = rng.standard_normal((2, 5, 11))

    def forward(p):
        return bert.forward(p, ids, cfg, token_type_ids=types, key_mask=key_mask)

    _, ctx = forward(params)
    grads = bert.backward(dlogits, ctx)    # head, then encoder; tok_emb's two uses summed
    assert set(grads) == set(params)
    for key, grad in grads.items():
        flat = rng.choice(grad.size, size=min(SPOTS, grad.size), replace=False)
        spots = np.unravel_index(flat, grad.shape)

        def nudged_forward(inputs, key=key, spots=spots):
            nudged = params[key].copy()
            nudged[spots] += inputs["delta"]
            return forward({**params, key: nudged})

        numeric = numeric_gradient(nudged_forward, {"delta": np.zeros(len(flat))}, "delta",
                                   dlogits)
        if np.abs(numeric).max() < 1e-8:  # key biases: softmax ignores a per-row constant
            assert np.abs(grad[spots]).max() < 1e-8, key
            continue
        assert relative_error(grad[spots], numeric) < GRADCHECK_TOL, key


def test_mean_pool_ignores_padding_and_l2_normalize_gives_unit_rows():
    hidden = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    pooled = bert.mean_pool(hidden, mask)
    np.testing.assert_allclose(pooled[0], hidden[0].mean(axis=0))
    np.testing.assert_allclose(pooled[1], hidden[1, 0])
    unit = bert.l2_normalize(pooled)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)
    assert unit.dtype == np.float32
    np.testing.assert_array_equal(bert.l2_normalize(np.zeros((1, 4), np.float32)), 0.0)


def test_config_round_trips_and_an_encoder_has_no_cache():
    cfg = tiny(activation="gelu_tanh", mlm_head=False)
    assert bert.BertConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(GlassformerError, match="encoder"):
        Model(cfg, bert.init_params(cfg, np.random.default_rng(0))).new_cache(1)


@pytest.mark.parametrize("mode", ["head", "model", "tanh"])
def test_registered_gradcheck_cases_of_the_masked_lm(mode):
    result = run_case(find_case("bert_mlm", mode))
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_hidden_states_mlm_logits_and_grads_match_hf_bert():
    torch.manual_seed(0)
    hf_cfg = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=48,
                                     max_position_embeddings=16, initializer_range=0.1)
    model = transformers.BertForMaskedLM(hf_cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)   # biases and norms away from init
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    cfg = config_from_hf(hf_cfg.to_dict(), mlm_head=True)
    params = hf_params(cfg, state)
    rng = np.random.default_rng(0)
    # note: ids start at 1. HF's word embedding has padding_idx=pad_token_id=0, whose row torch
    # never gives a lookup gradient; glassformer's embedding treats every row alike.
    ids = rng.integers(1, 60, (3, 12))
    types = (np.arange(12) >= 6).astype(np.int64)[None].repeat(3, axis=0)
    mask = np.ones((3, 12), np.int64)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    logits, ctx = bert.forward(params, ids, cfg, token_type_ids=types, key_mask=mask)
    hidden = ctx.mlm.dense.x                 # the last hidden state: the head's saved input
    out = model(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.from_numpy(types), output_hidden_states=True)
    ref_hidden = out.hidden_states[-1]
    hidden_diff = np.abs(hidden - ref_hidden.detach().numpy()).max()
    logits_diff = np.abs(logits - out.logits.detach().numpy()).max()
    assert hidden_diff <= HF_ATOL and logits_diff <= HF_ATOL, (hidden_diff, logits_diff)
    # gradients of sum(logits * G) for a random G, through head and encoder
    upstream = rng.standard_normal(logits.shape).astype(np.float32)
    (out.logits * torch.from_numpy(upstream)).sum().backward()
    grads = bert.backward(upstream, ctx)
    theirs = hf_params(cfg, {k: p.grad.numpy() for k, p in model.named_parameters()
                             if p.grad is not None})
    assert set(grads) == set(theirs)
    for key, grad in grads.items():
        if key.endswith("attn.bk"):
            assert max(np.abs(grad).max(), np.abs(theirs[key]).max()) < ZERO_GRAD_ATOL, key
            continue
        err = np.abs(grad - theirs[key]).max() / max(np.abs(theirs[key]).max(), GRAD_FLOOR)
        assert err < TORCH_RTOL, (key, err)


def hf_params(cfg, state):
    table = hf_names.hf_keys_by_table_name("bert", state)
    return hf_names.to_glassformer("bert", cfg, {name: state[key] for name, key in table.items()})
