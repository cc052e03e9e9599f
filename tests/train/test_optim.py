"""AdamW, SGD and global-norm clipping against torch.optim.AdamW and clip_grad_norm_."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.train.optim import (AdamWState, adamw_init, adamw_step, clip_grad_norm,
                                     decay_keys, sgd_step)

torch = pytest.importorskip("torch")

RTOL = 1e-6   # float32 with the same operation order as torch: a few ulps after several steps
ATOL = 1e-7   # for entries that pass near zero, where a relative bound means nothing
N_STEPS = 6


def _make_params(rng):
    """A tiny model's worth of parameters: two matrices, a bias, a norm gain, an embedding."""
    shapes = {"tok_emb": (11, 8), "blocks.0.attn.wq": (8, 8), "blocks.0.attn.bq": (8,),
              "blocks.0.norm1.w": (8,), "lm_head": (8, 11)}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _make_grads(params, rng):
    return {k: rng.standard_normal(p.shape).astype(np.float32) for k, p in params.items()}


def test_decay_keys_are_the_matrices():
    params = _make_params(np.random.default_rng(0))
    assert decay_keys(params) == {"tok_emb", "blocks.0.attn.wq", "lm_head"}


def test_adamw_matches_torch_over_several_steps():
    rng = np.random.default_rng(0)
    params = _make_params(rng)
    grads_per_step = [_make_grads(params, rng) for _ in range(N_STEPS)]
    lrs = [1e-3 * (i + 1) / N_STEPS for i in range(N_STEPS)]  # changing lr, as under a schedule
    hyper = dict(beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1)

    tparams = {k: torch.tensor(p.copy(), requires_grad=True) for k, p in params.items()}
    decayed = [tparams[k] for k in sorted(decay_keys(params))]
    others = [tparams[k] for k in sorted(params.keys() - decay_keys(params))]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": hyper["weight_decay"]},
                             {"params": others, "weight_decay": 0.0}],
                            lr=lrs[0], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"])
    state = adamw_init(params)
    for lr, grads in zip(lrs, grads_per_step):
        for group in opt.param_groups:
            group["lr"] = lr
        for k, t in tparams.items():
            t.grad = torch.tensor(grads[k])
        opt.step()
        params, state = adamw_step(params, grads, state, lr=lr, **hyper)

    assert state.t == N_STEPS
    for k, p in params.items():
        assert p.dtype == np.float32
        np.testing.assert_allclose(p, tparams[k].detach().numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(state.m[k], opt.state[tparams[k]]["exp_avg"].numpy(),
                                   rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(state.v[k], opt.state[tparams[k]]["exp_avg_sq"].numpy(),
                                   rtol=RTOL, atol=ATOL)


def test_adamw_decays_only_the_given_keys():
    params = {"w": np.ones((2, 2), np.float32), "b": np.ones(2, np.float32)}
    grads = {k: np.zeros_like(p) for k, p in params.items()}
    params, _ = adamw_step(params, grads, adamw_init(params), lr=0.1, weight_decay=0.5)
    assert np.all(params["w"] == np.float32(1.0 - 0.1 * 0.5))  # zero grads: only decay moves w
    assert np.all(params["b"] == 1.0)
    params, _ = adamw_step(params, grads, adamw_init(params), lr=0.1, weight_decay=0.5,
                           decay=["b"])
    assert np.all(params["b"] == np.float32(0.95))


def test_adamw_rejects_mismatched_grads_and_bad_hyperparameters():
    params = {"w": np.ones((2, 2), np.float32)}
    state = adamw_init(params)
    with pytest.raises(GlassformerError, match="missing"):
        adamw_step(params, {}, state, lr=0.1)
    with pytest.raises(GlassformerError, match="shape"):
        adamw_step(params, {"w": np.ones(4, np.float32)}, state, lr=0.1)
    with pytest.raises(GlassformerError, match="betas"):
        adamw_step(params, {"w": np.ones((2, 2), np.float32)}, state, lr=0.1, beta2=1.0)
    with pytest.raises(GlassformerError, match="not parameters"):
        adamw_step(params, {"w": np.ones((2, 2), np.float32)}, state, lr=0.1, decay=["x"])


def test_adamw_keeps_float32_with_numpy_scalar_hyperparameters():
    params = {"w": np.ones((3, 3), np.float32)}
    grads = {"w": np.full((3, 3), 0.5, np.float32)}
    params, state = adamw_step(params, grads, adamw_init(params), lr=np.float64(1e-3),
                               beta1=np.float64(0.9))
    assert params["w"].dtype == np.float32 and state.m["w"].dtype == np.float32
    assert isinstance(state, AdamWState)


@pytest.mark.parametrize("max_norm", [0.5, 1e6])  # clipping active, and a no-op
def test_clip_grad_norm_matches_torch(max_norm):
    rng = np.random.default_rng(1)
    grads = _make_grads(_make_params(rng), rng)
    tensors = [torch.zeros(g.shape, requires_grad=True) for g in grads.values()]
    for t, g in zip(tensors, grads.values()):
        t.grad = torch.tensor(g.copy())
    torch_norm = torch.nn.utils.clip_grad_norm_(tensors, max_norm)
    clipped, norm = clip_grad_norm(grads, max_norm)
    assert norm == pytest.approx(float(torch_norm), rel=RTOL)
    for t, g in zip(tensors, clipped.values()):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=RTOL, atol=ATOL)


def test_sgd_step():
    params = {"w": np.ones((2, 2), np.float32)}
    params = sgd_step(params, {"w": np.full((2, 2), 2.0, np.float32)}, lr=0.25)
    assert params["w"].dtype == np.float32
    assert np.all(params["w"] == 0.5)
