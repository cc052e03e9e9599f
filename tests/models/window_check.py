"""The checks every windowed family's parity test makes (test_window_parity.py): a random
transformers model, saved and loaded, gives the same logits at a prompt 3x its window, the same
greedy ids 32 tokens past the window (generate decodes with ring caches), gradients equal to
torch autograd's, and glassformer's own export loads in transformers with the same logits."""
import numpy as np

from glassformer.io import hf_names
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.train.step import loss_and_grads

from tests.models.hf_check import assert_logits_and_greedy_match

HF_ATOL = 1e-4
GRAD_RTOL = 1e-5
GRAD_FLOOR = 1e-6
NEW_TOKENS = 32


def spread_out(torch, model, scale: float = 0.1):
    """Give every 1-d parameter (norm gains, biases, sinks) random values."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * scale)
    return model.eval()


def left_padded(vocab: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (2, length))
    mask = np.ones((2, length), np.int64)
    mask[1, :3] = 0   # left padding
    return ids, mask


def check_loaded(reference, folder, window: int, vocab: int):
    """Logits at 3x the window and greedy ids past it; returns the loaded model."""
    reference.save_pretrained(folder)
    model = load_pretrained(folder)
    ids, mask = left_padded(vocab, 3 * window)
    assert_logits_and_greedy_match(model, reference, ids, mask, atol=HF_ATOL,
                                   new_tokens=NEW_TOKENS)
    return model


def check_gradients(torch, reference, model, vocab: int, length: int) -> None:
    """Cross-entropy gradients of every param equal torch autograd's (float32)."""
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, vocab, (2, length)), rng.integers(0, vocab, (2, length))
    loss, grads = loss_and_grads(model.family, model.params, model.cfg, x, y, rng=None)
    reference.train()
    reference.zero_grad()
    logits = reference(torch.from_numpy(x)).logits
    torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                   torch.from_numpy(y).reshape(-1))
    torch_loss.backward()
    reference.eval()
    theirs = {k: p.grad.numpy() for k, p in reference.named_parameters() if p.grad is not None}
    table = hf_names.hf_keys_by_table_name(model.arch, theirs)
    theirs = hf_names.to_glassformer(model.arch, model.cfg,
                                     {name: theirs[k] for name, k in table.items()})
    assert abs(loss - torch_loss.item()) <= GRAD_RTOL * abs(loss)
    assert set(grads) == set(theirs)
    for key, grad in grads.items():
        err = np.abs(grad - theirs[key]).max() / max(np.abs(theirs[key]).max(), GRAD_FLOOR)
        assert err < GRAD_RTOL, (key, err)


def check_export(torch, transformers, model, folder, length: int) -> None:
    """glassformer's save_pretrained folder loads in transformers with the same logits."""
    save_pretrained(model, folder)
    exported = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = np.random.default_rng(2).integers(0, model.cfg.vocab_size, (2, length))
    with torch.no_grad():
        theirs = exported(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(model(ids) - theirs).max() <= HF_ATOL
