"""The SAE's loss and every gradient equal SAELens 6.51's on the same batch (torch autograd through
sae_lens's own StandardTrainingSAE and TopKTrainingSAE, TopK's auxiliary loss on dead features
included), in float64, to 1e-5 relative."""
import numpy as np
import pytest

from glassformer.interpret.sae.model import SAEConfig, sae_backward, sae_forward
from saelens_ref import sae_lens

N, C, F = 16, 8, 24
TOL = 1e-5


def _batch(seed: int, *, unit_rows: bool):
    rng = np.random.default_rng(seed)
    params = {"w_enc": rng.standard_normal((C, F)) * 0.5, "b_enc": rng.standard_normal(F) * 0.3,
              "w_dec": rng.standard_normal((F, C)) * 0.5, "b_dec": rng.standard_normal(C) * 0.3}
    if unit_rows:
        params["w_dec"] /= np.linalg.norm(params["w_dec"], axis=-1, keepdims=True)
    return params, rng.standard_normal((N, C))


def _reference(ref, sae, params, x, dead=None):
    """(loss, grads) of sae_lens's training_forward_pass on x, with params loaded into sae."""
    import torch
    names = {"w_enc": "W_enc", "b_enc": "b_enc", "w_dec": "W_dec", "b_dec": "b_dec"}
    with torch.no_grad():
        for ours, theirs in names.items():
            getattr(sae, theirs).copy_(torch.from_numpy(params[ours]))
    coefficients = {"l1": sae.cfg.l1_coefficient} if hasattr(sae.cfg, "l1_coefficient") else {}
    step = ref.TrainStepInput(sae_in=torch.from_numpy(x), coefficients=coefficients,
                              dead_neuron_mask=None if dead is None else torch.from_numpy(dead),
                              n_training_steps=0, is_logging_step=False)
    out = sae.training_forward_pass(step)
    out.loss.backward()
    grads = {ours: getattr(sae, theirs).grad.numpy() for ours, theirs in names.items()}
    return float(out.loss.detach()), grads, out.feature_acts.detach().numpy()


def _assert_matches(ours, theirs):
    loss, acts, grads = ours
    ref_loss, ref_grads, ref_acts = theirs
    assert abs(loss - ref_loss) <= TOL * abs(ref_loss)
    np.testing.assert_allclose(acts, ref_acts, rtol=TOL, atol=1e-12)
    for name, grad in grads.items():
        scale = np.max(np.abs(ref_grads[name]))
        assert np.max(np.abs(grad - ref_grads[name])) <= TOL * scale, name


@pytest.mark.parametrize("seed", [0, 1])
def test_relu_l1_matches_saelens_standard(seed):
    ref = sae_lens()
    params, x = _batch(seed, unit_rows=False)     # the penalty's norms matter off unit norm
    cfg = SAEConfig(d_in=C, d_sae=F, arch="relu", l1=2.5)
    loss, acts, _, ctx = sae_forward(params, x, cfg)
    grads, _ = sae_backward(ctx)
    sae = ref.StandardTrainingSAE(ref.StandardTrainingSAEConfig(d_in=C, d_sae=F, dtype="float64",
                                                                l1_coefficient=2.5))
    _assert_matches((loss, acts, grads), _reference(ref, sae, params, x))


@pytest.mark.parametrize("rescale, unit_rows", [(False, False), (True, True)])
def test_topk_matches_saelens_topk(rescale, unit_rows):
    """Without rescale_acts_by_decoder_norm, on any decoder; with it (SAELens's default for
    training), on unit-norm decoder rows, which glassformer keeps: the norms' gradient paths then
    cancel (d/dn of acts*n/n), so the two agree to rounding."""
    ref = sae_lens()
    params, x = _batch(3, unit_rows=unit_rows)
    cfg = SAEConfig(d_in=C, d_sae=F, arch="topk", k=5)
    loss, acts, _, ctx = sae_forward(params, x, cfg)
    grads, _ = sae_backward(ctx)
    sae = ref.TopKTrainingSAE(ref.TopKTrainingSAEConfig(d_in=C, d_sae=F, k=5, dtype="float64",
                                                        rescale_acts_by_decoder_norm=rescale))
    _assert_matches((loss, acts, grads), _reference(ref, sae, params, x))


@pytest.mark.parametrize("n_dead", [2, 7])
@pytest.mark.parametrize("rescale, unit_rows", [(False, False), (True, True)])
def test_topk_aux_loss_on_dead_features_matches_saelens(n_dead, rescale, unit_rows):
    """AuxK: 2 dead features (k_aux = 2, scale 2 / (C // 2) = 0.5) and 7 (k_aux = C // 2, scale 1)."""
    ref = sae_lens()
    params, x = _batch(4, unit_rows=unit_rows)
    dead = np.zeros(F, dtype=bool)
    dead[np.random.default_rng(5).choice(F, n_dead, replace=False)] = True
    cfg = SAEConfig(d_in=C, d_sae=F, arch="topk", k=5, aux_k=1.0)
    loss, acts, _, ctx = sae_forward(params, x, cfg, dead=dead)
    assert ctx.aux.error is not None
    grads, _ = sae_backward(ctx)
    sae = ref.TopKTrainingSAE(ref.TopKTrainingSAEConfig(d_in=C, d_sae=F, k=5, dtype="float64",
                                                        aux_loss_coefficient=1.0,
                                                        rescale_acts_by_decoder_norm=rescale))
    _assert_matches((loss, acts, grads), _reference(ref, sae, params, x, dead))
