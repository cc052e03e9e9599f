"""Masked-LM BERT against transformers' BertForMaskedLM (random init, several configs, padding in
the batch): logits, the masked-LM loss with ignored positions, and the gradient of every
parameter against torch autograd; and the mlm objective's loss and grads (train/objectives/mlm.py) against
the same loss computed by torch."""
import numpy as np
import pytest

from glassformer.io import hf_names
from glassformer.io.hf_config import config_from_hf
from glassformer.models import bert
from glassformer.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.train.objectives.mlm import mlm_loss_and_grads

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow   # HF parity: transformers is imported and three models built
transformers = pytest.importorskip("transformers")

LOGITS_RTOL = 1e-4   # the bar, relative to the largest |logit|
LOSS_RTOL = 1e-5     # one float32 mean over a few dozen positions
GRAD_RTOL = 1e-5     # float32 grads, relative to max(|ref|) of each param
GRAD_FLOOR = 1e-6
# Key-bias grads are zero in exact arithmetic (softmax ignores a constant added to a row of
# scores): both sides are float32 noise, far below the model's gradient scale.
ZERO_GRAD_ATOL = 1e-5

CONFIGS = {
    "small-gelu": dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=24, max_position_embeddings=12, type_vocab_size=2),
    "deeper-gelu_new": dict(vocab_size=70, hidden_size=24, num_hidden_layers=3,
                            num_attention_heads=3, intermediate_size=40,
                            max_position_embeddings=16, type_vocab_size=1, hidden_act="gelu_new"),
    "wide-eps": dict(vocab_size=33, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=20, type_vocab_size=3,
                     layer_norm_eps=1e-5),
}


def hf_mlm(name, seed):
    torch.manual_seed(seed)
    hf_cfg = transformers.BertConfig(**CONFIGS[name], initializer_range=0.1,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForMaskedLM(hf_cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)   # biases and norms away from init
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    cfg = config_from_hf(hf_cfg.to_dict(), mlm_head=True)
    return model, cfg, ours_from(cfg, state)


def ours_from(cfg, arrays):
    table = hf_names.hf_keys_by_table_name("bert", arrays)
    return hf_names.to_glassformer("bert", cfg, {name: arrays[key] for name, key in table.items()})


def masked_batch(cfg, rng, padding: bool):
    """ids >= 1 (row 0 is HF's padding_idx: torch gives it no lookup gradient), a right-padded
    attention mask, and targets at ~15% of the real positions (IGNORE_INDEX elsewhere)."""
    b, t = 3, cfg.max_seq_len
    ids = rng.integers(1, cfg.vocab_size, (b, t))
    mask = np.ones((b, t), np.int64)
    if padding:
        mask[1, t - 3:] = 0
        mask[2, t // 2:] = 0
    chosen = (rng.random((b, t)) < 0.15) & (mask == 1)
    chosen[:, 1] = True                                   # at least one target per row
    targets = np.where(chosen, rng.integers(1, cfg.vocab_size, (b, t)), IGNORE_INDEX)
    return ids, mask, targets


def torch_loss_and_grads(model, cfg, ids, mask, targets):
    model.zero_grad()
    out = model(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, cfg.vocab_size),
                                             torch.from_numpy(targets).reshape(-1),
                                             ignore_index=IGNORE_INDEX)
    loss.backward()
    grads = ours_from(cfg, {k: p.grad.numpy() for k, p in model.named_parameters()
                            if p.grad is not None})
    return out.logits.detach().numpy(), float(loss.detach()), grads


def assert_grads_close(ours, theirs):
    assert set(ours) == set(theirs)
    for key, grad in ours.items():
        if key.endswith("attn.bk"):
            assert max(np.abs(grad).max(), np.abs(theirs[key]).max()) < ZERO_GRAD_ATOL, key
            continue
        err = np.abs(grad - theirs[key]).max() / max(np.abs(theirs[key]).max(), GRAD_FLOOR)
        assert err < GRAD_RTOL, (key, err)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_masked_loss_and_every_grad_match_bert_for_masked_lm(name):
    model, cfg, params = hf_mlm(name, seed=len(name))
    ids, mask, targets = masked_batch(cfg, np.random.default_rng(0), padding=True)
    ref_logits, ref_loss, ref_grads = torch_loss_and_grads(model, cfg, ids, mask, targets)
    logits, ctx = bert.forward(params, ids, cfg, key_mask=mask)          # (B, T, V)
    assert logits.shape == (3, cfg.max_seq_len, cfg.vocab_size)
    assert np.abs(logits - ref_logits).max() <= LOGITS_RTOL * np.abs(ref_logits).max()
    loss, ce_ctx = cross_entropy_forward(logits, targets)
    assert float(loss) == pytest.approx(ref_loss, rel=LOSS_RTOL)
    grads = bert.backward(cross_entropy_backward(np.float32(1.0), ce_ctx), ctx)
    assert_grads_close(grads, ref_grads)


def test_mlm_objective_loss_and_grads_match_torch():
    """train/objectives/mlm.py's head-on-chosen-rows path (no padding: the objective's windows have none)."""
    model, cfg, params = hf_mlm("deeper-gelu_new", seed=3)
    ids, mask, targets = masked_batch(cfg, np.random.default_rng(1), padding=False)
    _, ref_loss, ref_grads = torch_loss_and_grads(model, cfg, ids, mask, targets)
    loss, grads, _ = mlm_loss_and_grads(bert.FAMILY, params, cfg, ids, targets, rng=None)
    assert loss == pytest.approx(ref_loss, rel=LOSS_RTOL)
    assert_grads_close(grads, ref_grads)
