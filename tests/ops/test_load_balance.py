"""MoE balance losses: the auxiliary loss against transformers' `load_balancing_loss_func`
(forward and torch autograd gradient), the router z-loss against Switch Transformers'
`router_z_loss_func`, float64 finite differences for every `moe_*` case, dtypes, the
expert-load count and DeepSeek-V3's bias update, and one clear error for each bad input."""
import json

import numpy as np
import pytest
from ops_parity import assert_close, needs_torch, torch

from glassformer.cli import main
from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases import ALL_CASES
from glassformer.gradcheck.cases.moe_balance import top_k_experts
from glassformer.ops.expert_bias import expert_bias_update
from glassformer.ops.load_balance import (expert_counts, expert_load, load_balance_backward,
                                          load_balance_forward)
from glassformer.ops.router_z_loss import router_z_loss_backward, router_z_loss_forward

GRADCHECK_TOL = 1e-6   # a right float64 backward of a scalar loss gives ~1e-8 or better
TORCH_RTOL = 1e-5      # float32, a softmax and two means deep
MOE_CASES = [case for case in ALL_CASES if case.name in ("moe_aux_loss", "moe_z_loss")]


@pytest.mark.parametrize("case", MOE_CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck(case):
    result = run_case(case, tolerance=GRADCHECK_TOL)
    assert result.ok, result.per_input


def test_gradcheck_command_lists_the_moe_rows(capsys):
    assert main(["gradcheck", "moe_aux_loss", "moe_z_loss", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(row["name"], row["mode"]) for row in rows] == [(c.name, c.mode) for c in MOE_CASES]
    assert all(row["ok"] for row in rows)


def _routing(seed, shape, top_k, dtype=np.float32, padded=()):
    rng = np.random.default_rng(seed)
    logits = (2.0 * rng.standard_normal(shape)).astype(dtype)
    mask = np.ones(shape[1], dtype=bool)
    mask[list(padded)] = False
    return logits, top_k_experts(logits, top_k), mask


@needs_torch
@pytest.mark.parametrize("seed, shape, top_k, padded", [
    (0, (3, 12, 8), 2, ()),             # (L, N, E), no padding
    (1, (2, 10, 5), 3, (1, 4, 9)),      # padding rows masked out of both means
    (2, (1, 7, 4), 1, (0,)),
])
def test_aux_loss_and_gradient_match_transformers(seed, shape, top_k, padded):
    qwen3_moe = pytest.importorskip("transformers.models.qwen3_moe.modeling_qwen3_moe",
                                    exc_type=ImportError)
    logits, chosen, mask = _routing(seed, shape, top_k, padded=padded)
    loss, ctx = load_balance_forward(logits, chosen, mask=mask if padded else None)
    dlogits = load_balance_backward(np.array(1.0, np.float32), ctx)
    layers = torch.from_numpy(logits.copy()).requires_grad_(True)
    batch_mask = torch.from_numpy(mask.reshape(1, -1).astype(np.int64)) if padded else None
    ref = qwen3_moe.load_balancing_loss_func(tuple(layers), shape[2], top_k, batch_mask)
    ref.backward()
    assert loss.dtype == np.float32 and dlogits.dtype == np.float32
    assert_close(loss, ref.detach().numpy(), TORCH_RTOL)
    assert_close(dlogits, layers.grad.numpy(), TORCH_RTOL)


@needs_torch
@pytest.mark.parametrize("seed, shape, top_k, padded", [
    (3, (3, 12, 8), 2, ()),
    (4, (2, 10, 5), 3, (1, 4, 9)),
])
def test_per_layer_aux_loss_is_the_mean_of_each_layers_transformers_loss(seed, shape, top_k,
                                                                          padded):
    """per_layer=True: transformers' loss of each layer alone, averaged (the Switch paper's)."""
    qwen3_moe = pytest.importorskip("transformers.models.qwen3_moe.modeling_qwen3_moe",
                                    exc_type=ImportError)
    logits, chosen, mask = _routing(seed, shape, top_k, padded=padded)
    loss, ctx = load_balance_forward(logits, chosen, mask=mask if padded else None,
                                     per_layer=True)
    dlogits = load_balance_backward(np.array(1.0, np.float32), ctx)
    layers = torch.from_numpy(logits.copy()).requires_grad_(True)
    batch_mask = torch.from_numpy(mask.reshape(1, -1).astype(np.int64)) if padded else None
    ref = sum(qwen3_moe.load_balancing_loss_func((layer,), shape[2], top_k, batch_mask)
              for layer in layers) / shape[0]
    ref.backward()
    assert loss.dtype == np.float32 and dlogits.dtype == np.float32
    assert_close(loss, ref.detach().numpy(), TORCH_RTOL)
    assert_close(dlogits, layers.grad.numpy(), TORCH_RTOL)


def test_per_layer_sees_the_skew_pooling_hides():
    """Layer 0 sends every row to expert 0, layer 1 to expert 1: pooled, f and P look even
    over the two experts; per layer, each layer's loss is at its largest (E * k)."""
    logits = np.array([[[9.0, -9.0]] * 4, [[-9.0, 9.0]] * 4])             # (L=2, N=4, E=2)
    chosen = np.array([[[0]] * 4, [[1]] * 4])                               # (2, 4, k=1)
    pooled, _ = load_balance_forward(logits, chosen)
    each, _ = load_balance_forward(logits, chosen, per_layer=True)
    assert float(pooled) == pytest.approx(1.0, abs=1e-6)    # the even router's value, k
    assert float(each) == pytest.approx(2.0, abs=1e-6)      # E * k: all on one expert


@needs_torch
@pytest.mark.parametrize("seed", range(2))
def test_z_loss_and_gradient_match_switch_transformers(seed):
    switch = pytest.importorskip(
        "transformers.models.switch_transformers.modeling_switch_transformers",
        exc_type=ImportError)
    logits, _, _ = _routing(seed, (3, 9, 6), 1)
    loss, ctx = router_z_loss_forward(logits)
    dlogits = router_z_loss_backward(np.array(1.0, np.float32), ctx)
    ref_logits = torch.from_numpy(logits.copy()).requires_grad_(True)
    ref = switch.router_z_loss_func(ref_logits)
    ref.backward()
    assert_close(loss, ref.detach().numpy(), TORCH_RTOL)
    assert_close(dlogits, ref_logits.grad.numpy(), TORCH_RTOL)


def test_z_loss_padding_drops_the_rows():
    logits, _, mask = _routing(3, (2, 6, 4), 1, dtype=np.float64, padded=(0, 3))
    masked, _ = router_z_loss_forward(logits, mask=mask)
    kept, _ = router_z_loss_forward(np.ascontiguousarray(logits[:, mask]))
    assert np.isclose(masked, kept, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(dtype):
    logits, chosen, mask = _routing(4, (2, 5, 3), 2, dtype=dtype, padded=(1,))
    for loss, ctx, backward in [(*load_balance_forward(logits, chosen, mask=mask),
                                 load_balance_backward),
                                (*router_z_loss_forward(logits, mask=mask),
                                 router_z_loss_backward)]:
        assert loss.dtype == dtype and loss.shape == ()
        assert backward(np.array(1.0, dtype), ctx).dtype == dtype


def test_even_routing_gives_k_and_all_padding_gives_zero():
    logits = np.zeros((2, 4, 4))
    chosen = np.array([[0, 1], [2, 3], [0, 1], [2, 3]])[None].repeat(2, axis=0)   # (L, N, k)
    loss, _ = load_balance_forward(logits, chosen)
    assert np.isclose(loss, 2.0)                       # E * sum (k/E)(1/E) = k
    none_kept = np.zeros(4, dtype=bool)
    loss, ctx = load_balance_forward(logits, chosen, mask=none_kept)
    assert loss == 0.0 and not load_balance_backward(np.array(1.0), ctx).any()


def test_expert_load_counts_slots_per_layer_and_skips_padding():
    chosen = np.array([[[0, 1], [0, 2], [3, 0]],
                       [[1, 2], [1, 3], [1, 2]]])      # (L=2, N=3, k=2)
    mask = np.array([True, True, False])
    assert expert_counts(chosen, 4, mask).tolist() == [[2, 1, 1, 0], [0, 2, 1, 1]]
    load = expert_load(chosen, 4)
    assert np.allclose(load.sum(axis=1), 1.0)
    assert load[1].tolist() == [0.0, 0.5, 2 / 6, 1 / 6]


def test_bias_update_moves_against_the_load():
    bias = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    chosen = np.array([[[0], [0], [0], [1], [1], [2]]])           # loads 3, 2, 1, 0; mean 1.5
    new = expert_bias_update(bias, expert_counts(chosen, 4).astype(np.float32), gamma=0.01)
    assert new.dtype == np.float32
    assert np.allclose(new - bias, [[-0.01, -0.01, 0.01, 0.01]])
    at_mean = np.array([[[0], [1], [2], [3]]])                     # every load equals the mean
    same = expert_bias_update(bias, expert_counts(at_mean, 4).astype(np.float32), gamma=0.01)
    assert np.array_equal(same, bias)
    assert np.allclose(bias, [[0.1, 0.2, 0.3, 0.4]])                # the input is unchanged


def test_bad_inputs_raise_one_clear_line():
    logits = np.zeros((2, 3, 4), dtype=np.float32)
    with pytest.raises(ShapeError, match=r"expected chosen of shape \(L=2, N=3, k\)"):
        load_balance_forward(logits, np.zeros((2, 4, 1), dtype=np.int64))
    with pytest.raises(GlassformerError, match="expert id 4 at position .* outside the router's E=4"):
        load_balance_forward(logits, np.full((2, 3, 1), 4))
    with pytest.raises(ShapeError, match=r"expected mask of shape \(N=3\)"):
        load_balance_forward(logits, np.zeros((2, 3, 1), dtype=np.int64),
                             mask=np.ones(4, dtype=bool))
    with pytest.raises(ShapeError, match="at least one expert and one choice"):
        load_balance_forward(logits, np.zeros((2, 3, 0), dtype=np.int64))
    with pytest.raises(GlassformerError, match="expected gamma to be finite and >= 0"):
        expert_bias_update(np.zeros((2, 4)), np.ones((2, 4)), gamma=-1.0)
    with pytest.raises(ShapeError, match=r"expected load of shape \(L=2, E=4\)"):
        expert_bias_update(np.zeros((2, 4)), np.ones((2, 3)), gamma=0.1)
