"""GPT-2 model: shapes and dtypes, float64 gradcheck of a tiny config, whole-model parity with
PyTorch autograd (loss and every parameter gradient), and bad input."""

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import numeric_gradient, relative_error
from glassformer.models import gpt2
from glassformer.models.model import Model
from glassformer.train.step import loss_and_grads

# Whole-model float32 parity: ~30 ops deep, each rounding at ~1e-7; 1e-5 is the bar.
TORCH_RTOL = 1e-5
# Gradients that are exactly zero in exact arithmetic (key biases: softmax ignores a constant
# added to a whole row of scores) come out as float32 noise; compare them to the model's scale.
ZERO_GRAD_ATOL = 1e-6
GRADCHECK_TOL = 1e-6


def tiny(**overrides):
    base = dict(vocab_size=7, max_seq_len=6, n_layer=2, n_head=2, d_model=8, d_ff=12)
    return gpt2.GPT2Config(**{**base, **overrides})


def test_forward_shapes_dtypes_and_param_count():
    cfg = tiny()
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    logits, _ = gpt2.forward(params, ids, cfg)
    assert logits.shape == (2, 3, 7) and logits.dtype == np.float32
    # tok 7*8 + pos 6*8 + per layer (2 LN * 16 + attn 4*64 + 4*8 + mlp 2*96 + 12 + 8) + LN_f 16
    per_layer = 32 + (4 * 64 + 4 * 8) + (2 * 96 + 12 + 8)
    assert Model(cfg, params).num_params() == 56 + 48 + 2 * per_layer + 16


def test_init_scales_residual_projections():
    cfg = gpt2.GPT2Config(n_layer=8, d_model=256, vocab_size=50)
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    assert params["blocks.0.attn.wq"].std() == pytest.approx(0.02, rel=0.05)
    assert params["blocks.0.attn.wo"].std() == pytest.approx(0.02 / np.sqrt(16), rel=0.05)
    assert params["blocks.0.mlp.w_down"].std() == pytest.approx(0.02 / np.sqrt(16), rel=0.05)


@pytest.mark.parametrize("bias,tied", [(True, True), (False, False)])
def test_float64_gradcheck_of_every_parameter(bias, tied):
    cfg = tiny(bias=bias, tie_embeddings=tied, n_layer=1)
    rng = np.random.default_rng(1)
    params = {k: v.astype(np.float64) for k, v in gpt2.init_params(cfg, rng).items()}
    for key in params:  # larger weights than init, so every path carries a real gradient
        params[key] = params[key] * 10.0 + (rng.standard_normal(params[key].shape) * 0.1
                                            if params[key].ndim == 1 else 0.0)
    ids = rng.integers(0, 7, (2, 4))
    dlogits = rng.standard_normal((2, 4, 7))

    def forward(inputs):
        return gpt2.forward(inputs, ids, cfg)

    _, ctx = forward(params)
    grads = gpt2.backward(dlogits, ctx)
    assert set(grads) == set(params)
    for key, grad in grads.items():
        numeric = numeric_gradient(forward, params, key, dlogits)
        if np.abs(numeric).max() < 1e-7:  # key biases: zero in exact arithmetic
            assert np.abs(grad).max() < 1e-7, key
            continue
        assert relative_error(grad, numeric) < GRADCHECK_TOL, key


def test_dropout_only_in_training():
    cfg = tiny(dropout=0.5)
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    ids = np.array([[1, 2, 3]])
    eval_a, _ = gpt2.forward(params, ids, cfg)
    eval_b, _ = gpt2.forward(params, ids, cfg)
    train_a, _ = gpt2.forward(params, ids, cfg, train=True, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(eval_a, eval_b)
    assert not np.allclose(eval_a, train_a)


def test_bad_input_is_a_clear_error():
    cfg = tiny()
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    with pytest.raises(GlassformerError, match="past the context of max_seq_len=6"):
        gpt2.forward(params, np.zeros((1, 7), dtype=np.int64), cfg)
    with pytest.raises(GlassformerError, match="token id 9 at position"):
        gpt2.forward(params, np.array([[1, 9]]), cfg)
    with pytest.raises(GlassformerError, match=r"shape \(B, T\)"):
        gpt2.forward(params, np.array([1, 2]), cfg)
    with pytest.raises(GlassformerError, match="n_head=3 must divide d_model=8"):
        tiny(n_head=3)


torch = pytest.importorskip("torch")
from torchref import gpt as torch_gpt  # noqa: E402  (torchref/ sits at the root: pytest pythonpath)


@pytest.mark.parametrize("bias,tied", [(True, True), (False, False)])
def test_loss_and_every_gradient_match_torch(bias, tied):
    cfg = gpt2.GPT2Config(vocab_size=65, max_seq_len=32, n_layer=2, n_head=4, d_model=32,
                          bias=bias, tie_embeddings=tied)
    rng = np.random.default_rng(2)
    params = gpt2.init_params(cfg, rng)
    for key in params:  # move away from init so attention and norms carry real gradients
        if params[key].ndim == 2 and key != "tok_emb":
            params[key] = (params[key] * 8.0).astype(np.float32)
        elif params[key].ndim == 1:
            params[key] = (params[key] + rng.standard_normal(params[key].shape) * 0.1
                           ).astype(np.float32)
    x = rng.integers(0, 65, (3, 32))
    y = rng.integers(0, 65, (3, 32))
    loss, grads = loss_and_grads(gpt2, params, cfg, x, y, rng=None)
    model = torch_gpt.build(cfg, params)
    _, torch_loss = model(torch.from_numpy(x), torch.from_numpy(y))
    torch_loss.backward()
    theirs = torch_gpt.grads_as_ours(cfg, model)
    assert loss == pytest.approx(torch_loss.item(), rel=TORCH_RTOL)
    assert set(grads) == set(theirs)
    for key, grad in grads.items():
        assert grad.dtype == np.float32
        ref = theirs[key]
        if key.endswith("attn.bk"):
            assert np.abs(grad).max() < ZERO_GRAD_ATOL and np.abs(ref).max() < ZERO_GRAD_ATOL
            continue
        err = np.abs(grad - ref).max() / np.abs(ref).max()
        assert err < TORCH_RTOL, (key, err)
