"""ops/sae.py: the SAE encoder and loss pass their gradchecks (several seeds), TopK keeps exactly
k features per row (fewer only where a kept pre-activation is negative), and bad input is one
GlassformerError line."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases import ALL_CASES
from glassformer.ops.sae import sae_encode_forward, sae_loss_forward, top_k_mask

SAE_CASES = [case for case in ALL_CASES if case.name in ("sae_encode", "sae_loss", "sae",
                                                         "sae_aux")]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", SAE_CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck(case, seed):
    result = run_case(case, seed=seed)
    assert result.ok, result.per_input


def test_every_sae_mode_is_registered():
    assert {(c.name, c.mode) for c in SAE_CASES} >= {("sae_encode", "relu"),
                                                     ("sae_encode", "topk"), ("sae", "relu-l1"),
                                                     ("sae", "topk"), ("sae_aux", "3-dead")}


def test_topk_keeps_k_largest_per_row():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w_enc = rng.standard_normal((5, 9)).astype(np.float32)
    b_enc = np.full(9, 10.0, dtype=np.float32)         # every pre-activation positive
    acts, _ = sae_encode_forward(x, w_enc, b_enc, np.zeros(5, np.float32), k=3)
    assert acts.dtype == np.float32
    assert ((acts > 0).sum(axis=-1) == 3).all()
    pre = (x @ w_enc + b_enc)
    expected = np.sort(pre, axis=-1)[:, -3:]
    np.testing.assert_allclose(np.sort(acts, axis=-1)[:, -3:], expected, rtol=1e-6)


def test_top_k_mask_refuses_bad_k():
    with pytest.raises(GlassformerError, match="1 <= k <= d_sae"):
        top_k_mask(np.zeros((2, 4)), 5)


def test_shape_errors_are_one_line():
    with pytest.raises(GlassformerError):
        sae_encode_forward(np.zeros((2, 3)), np.zeros((4, 5)), np.zeros(5), np.zeros(3))
    with pytest.raises(GlassformerError):
        sae_loss_forward(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 5)), np.zeros((4, 3)))
