"""glassformer's hook points, hooks and logit attribution against TransformerLens 4.3
(TransformerBridge over the same transformers model, unprocessed weights), on a GPT-2-shaped and
a LLaMA-shaped model with random weights built offline (tests/interpret/tl_models.py)."""
import numpy as np
import pytest

pytest.importorskip("transformer_lens")
torch = pytest.importorskip("torch")

from tl_models import saved  # noqa: E402

from glassformer.interpret.attribution import logit_attribution, unembed_direction  # noqa: E402
from glassformer.interpret.cache import run_with_cache, run_with_hooks  # noqa: E402

IDS = np.array([[1, 5, 7, 3, 9, 2, 11, 4, 5, 7]])


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def models(request, tmp_path_factory):
    return saved(request.param, tmp_path_factory.mktemp(request.param))


def _rel(ours: np.ndarray, theirs: np.ndarray) -> float:
    """max |ours - theirs| / max |theirs| over the entries both hold finite (TransformerLens
    writes -3.4e38 where a score is masked, glassformer -inf)."""
    real = np.isfinite(ours) & (theirs > -1e30)
    assert np.array_equal(real, np.isfinite(ours)), "masked entries differ"
    return float(np.abs(ours - theirs)[real].max() / max(np.abs(theirs[real]).max(), 1e-12))


def test_every_hook_both_have_matches(models):
    ours, bridge, _ = models
    logits, cache = run_with_cache(ours, IDS)
    tl_logits, tl_cache = bridge.run_with_cache(torch.from_numpy(IDS))
    assert _rel(logits, tl_logits.detach().numpy()) <= 1e-4
    shared = [name for name in cache if name in tl_cache]
    assert len(shared) >= 18 * 2  # every name of the list, in both layers
    for name in shared:
        theirs = tl_cache[name].detach().numpy()
        assert cache[name].shape == theirs.shape, name
        assert _rel(cache[name], theirs) <= 1e-4, name


def test_zero_ablation_of_one_head_matches(models):
    ours, bridge, _ = models

    def zero_head(value, hook=None):
        value = value.copy() if isinstance(value, np.ndarray) else value.clone()
        value[:, :, 2] = 0
        return value
    logits = run_with_hooks(ours, IDS, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    theirs = bridge.run_with_hooks(torch.from_numpy(IDS),
                                   fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    plain = ours(IDS)
    assert np.abs(logits - plain).max() > 1e-3            # the ablation changed something
    assert _rel(logits, theirs.detach().numpy()) <= 1e-4


def test_logit_attribution_sums_and_matches_decompose_resid(models):
    ours, bridge, _ = models
    target, other = 7, 3
    result = logit_attribution(ours, IDS, target, other)
    assert abs(result.total - result.logit) <= 1e-5 * max(abs(result.logit), 1.0)
    _, tl_cache = bridge.run_with_cache(torch.from_numpy(IDS))
    heads, head_labels = tl_cache.stack_head_results(layer=-1, pos_slice=-1, apply_ln=True,
                                                     return_labels=True)
    parts, part_labels = tl_cache.decompose_resid(layer=None, pos_slice=-1, apply_ln=True,
                                                  return_labels=True)
    # TransformerLens's apply_ln centres (LayerNorm) and divides by the scale, leaving the
    # norm's weight to the unembedding: fold it into the direction
    direction = ours.params["norm_f.w"].astype(np.float64) * unembed_direction(ours, target, other)
    tl_heads = heads[:, 0].detach().numpy().astype(np.float64) @ direction
    tl_parts = parts[:, 0].detach().numpy().astype(np.float64) @ direction
    ours_by_label = dict(zip(result.labels, result.values))
    for label, value in zip(head_labels, tl_heads):
        assert abs(ours_by_label[label] - value) <= 1e-4 * np.abs(tl_heads).max(), label
    for label, value in zip(part_labels, tl_parts):
        if label in ("embed", "pos_embed"):
            assert abs(ours_by_label[label] - value) <= 1e-4 * np.abs(tl_parts).max(), label
        elif label.endswith("_mlp_out"):
            layer = int(label.split("_")[0])
            assert abs(ours_by_label[f"L{layer} MLP"] - value) <= 1e-4 * np.abs(tl_parts).max()
        elif label.endswith("_attn_out"):  # the heads of a layer, plus its output bias
            layer = int(label.split("_")[0])
            mine = sum(v for k, v in ours_by_label.items() if k.startswith(f"L{layer}H")
                       or k == f"L{layer} attn bias")
            assert abs(mine - value) <= 1e-4 * np.abs(tl_parts).max(), label
