"""The check two fine-tuning tests share: peft, loading a run folder's adapter onto the same base
in transformers, computes glassformer's logits, and the adapter moved them."""
import numpy as np
import pytest

from glassformer.io.pretrained import load_pretrained

PEFT_LOGITS_RTOL = 1e-4   # the bar, relative to the largest logit


def assert_peft_matches(base, run, *, moved: float) -> None:
    """peft.PeftModel over transformers' base, on random byte ids, equals glassformer's merged
    adapter within PEFT_LOGITS_RTOL of the largest logit; the base alone differs from it by more
    than moved * that tolerance (the adapter is not a no-op)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    ids = np.random.default_rng(0).integers(0, 256, (2, 9))
    ours = load_pretrained(base, adapter=run)(ids)                      # (B, T, V)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    with torch.no_grad():
        theirs = peft.PeftModel.from_pretrained(model, run).eval()(
            torch.from_numpy(ids)).logits.numpy()
    scale = np.abs(theirs).max()
    np.testing.assert_allclose(ours, theirs, atol=PEFT_LOGITS_RTOL * scale, rtol=0)
    assert np.abs(ours - load_pretrained(base)(ids)).max() > moved * PEFT_LOGITS_RTOL * scale
