"""The check every causal family's parity test makes against transformers (test_hf_parity.py,
test_moe_hf_parity.py, test_deepseek_v3_parity.py): the same logits on the real (unpadded)
positions within `atol`, and the same greedy continuation token for token."""
import numpy as np

from glassformer.generate.generate import generate


def assert_logits_and_greedy_match(model, reference, ids: np.ndarray, mask: np.ndarray, *,
                                   atol: float, new_tokens: int) -> None:
    """model: glassformer's; reference: the transformers model it was loaded from; ids, mask:
    (B, T) left-padded prompts."""
    import torch
    import transformers

    logits = model(ids, attention_mask=mask)
    with torch.no_grad():
        ref = reference(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits
    real = mask.astype(bool)  # padded positions' outputs are never read
    assert np.abs(logits - ref.numpy())[real].max() <= atol
    ours = np.stack(list(generate(model, ids, attention_mask=mask, max_new_tokens=new_tokens,
                                  temperature=0.0)), axis=1)
    greedy = transformers.GenerationConfig(max_new_tokens=new_tokens, do_sample=False,
                                           pad_token_id=0, eos_token_id=None)
    theirs = reference.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                                generation_config=greedy)[:, ids.shape[1]:]
    np.testing.assert_array_equal(ours, theirs.numpy())
