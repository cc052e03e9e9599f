"""SmolLM2-135M-Instruct looked inside (docs/interpretability.md), on inputs the docs do not
list: induction heads found on another random seed, and the layer where the subject of a
factual prompt reaches the last position, for another landmark. Slow: the model takes seconds
to load and patching runs 30 forwards of a batch."""
import numpy as np
import pytest

from glassformer.blas import blas_threads
from glassformer.interpret.attribution import attribution_patch
from glassformer.interpret.cache import cache_bytes, run_with_cache
from glassformer.interpret.heads import head_scores, strong_heads
from glassformer.interpret.patching import logit_diff_metric, patch

pytestmark = pytest.mark.slow


def test_induction_heads_on_another_seed(smollm2):
    with blas_threads(1):
        scores = head_scores(smollm2, "induction", seq_len=40, batch=3, seed=7)
    found = {(layer, head) for layer, head, _ in strong_heads(scores)}
    assert {(18, 6), (17, 3)} <= found                 # the docs' two strongest
    assert all(layer >= 17 for layer, _ in found)      # none in the first 17 layers


@pytest.mark.parametrize("seed, seq_len, batch", [(2026, 30, 2), (11, 25, 2)])
def test_the_docs_four_strongest_induction_heads_on_more_seeds(smollm2, seed, seq_len, batch):
    """Seeds and lengths the docs do not list: the same heads lead, L18H6 first."""
    with blas_threads(1):
        scores = head_scores(smollm2, "induction", seq_len=seq_len, batch=batch, seed=seed)
    strong = strong_heads(scores)
    found = {(layer, head) for layer, head, _ in strong}
    assert strong[0][:2] == (18, 6)
    assert {(18, 6), (17, 3), (17, 4), (17, 5)} <= found
    assert all(layer >= 17 for layer, _ in found)


def test_the_subject_reaches_the_last_position_at_layer_23(smollm2):
    tok = smollm2.tokenizer
    clean = np.array(tok.encode("The Golden Gate Bridge is in the city of"))
    corrupt = np.array(tok.encode("The Sydney Opera House is in the city of"))
    target, other = tok.encode(" San")[0], tok.encode(" Sydney")[0]
    with blas_threads(1):
        result = patch(smollm2, clean, corrupt, logit_diff_metric(target, other), ["attn_out"])
        estimate = attribution_patch(smollm2, clean, corrupt, target, other, kinds=["attn_out"])
    assert result.clean > 0 > result.corrupt
    table = result.tables["attn_out"].normalised(result.clean, result.corrupt)
    assert result.tables["attn_out"].peak() == (23, len(clean) - 1)
    assert table[23, -1] > 0.4
    guess = estimate.tables["attn_out"].normalised(result.clean, result.corrupt)
    assert estimate.tables["attn_out"].peak() == (23, len(clean) - 1)
    assert np.corrcoef(table.ravel(), guess.ravel())[0, 1] > 0.5


def test_a_512_token_cache_is_estimated_before_it_runs(smollm2):
    ids = np.random.default_rng(0).integers(0, smollm2.cfg.vocab_size, (1, 512))
    names = [f"blocks.{layer}.hook_resid_post" for layer in range(30)] + [
        "blocks.15.attn.hook_pattern"]
    need = cache_bytes(smollm2, ids, names)
    with blas_threads(1):
        _, cache = run_with_cache(smollm2, ids, names)
    assert cache.nbytes() == need
