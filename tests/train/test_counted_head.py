"""The LM head run only where a loss counts (objective.counted_loss_and_grads, issue 33): the same
loss and gradients as the head over every position, for GPT-2 and LLaMA, fully trained and with
LoRA adapters; and SFT uses it."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.io.peft import LoraConfig, adapter_constants, init_adapters
from glassformer.models import gpt2, llama
from glassformer.models.model import Model
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.train.objectives.objective import (counted_eval_loss, counted_loss_and_grads,
                                                    token_eval_loss, token_loss_and_grads)
from glassformer.train.objectives.sft import SFT

# float64 params and activations: the two paths add the same terms in other orders only
FLOAT64_RTOL = 1e-10
VOCAB = 23


def tiny_model(arch: str) -> Model:
    if arch == "gpt2":
        cfg = gpt2.GPT2Config(vocab_size=VOCAB, max_seq_len=16, n_layer=2, n_head=2, d_model=8)
        params = gpt2.init_params(cfg, np.random.default_rng(0))
    else:
        cfg = llama.LlamaConfig(vocab_size=VOCAB, max_seq_len=16, n_layer=2, n_head=2,
                                n_kv_head=1, d_model=8, d_ff=16)
        params = llama.init_params(cfg, np.random.default_rng(0))
    params = {k: v.astype(np.float64) * 5.0 for k, v in params.items()}
    return Model(cfg, params)


def chat_like_batch(rng) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) (3, 9) with the loss on 'replies' only: prompts and padding are IGNORE_INDEX."""
    x = rng.integers(0, VOCAB, (3, 9))
    y = rng.integers(0, VOCAB, (3, 9))
    y[:, :4] = IGNORE_INDEX            # prompts
    y[1, 7:] = IGNORE_INDEX            # padding
    return x, y


def split_for_lora(model: Model, rng) -> tuple[dict, dict]:
    """(trained adapters, frozen base + constants), B drawn nonzero so the adapters act."""
    targets = ("c_attn", "c_fc") if model.arch == "gpt2" else ("q_proj", "v_proj")
    lora_cfg = LoraConfig(r=2, alpha=4, dropout=0.0, targets=targets)
    adapters = init_adapters(model, lora_cfg, rng)
    adapters = {k: rng.standard_normal(v.shape) for k, v in adapters.items()}
    return adapters, {**model.params, **adapter_constants(adapters, lora_cfg)}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_head_on_counted_rows_equals_the_full_head(arch, lora):
    rng = np.random.default_rng(1)
    model = tiny_model(arch)
    x, y = chat_like_batch(rng)
    params, frozen = split_for_lora(model, rng) if lora else (model.params, None)
    got_loss, got, _ = counted_loss_and_grads(model.family, params, model.cfg, x, y, rng=None,
                                           dloss=0.5, frozen=frozen)
    want_loss, want, _ = token_loss_and_grads(model.family, params, model.cfg, x, y, rng=None,
                                           dloss=0.5, frozen=frozen)
    assert got_loss == pytest.approx(want_loss, rel=FLOAT64_RTOL)
    assert set(got) == set(want) == set(params)
    for key in got:
        np.testing.assert_allclose(got[key], want[key], rtol=FLOAT64_RTOL, atol=1e-13,
                                   err_msg=key)
    assert counted_eval_loss(model.family, params, model.cfg, x, y, frozen=frozen) == \
        pytest.approx(token_eval_loss(model.family, params, model.cfg, x, y, frozen=frozen),
                      rel=FLOAT64_RTOL)


def test_sft_runs_the_head_on_the_replies_only():
    assert SFT.loss_and_grads is counted_loss_and_grads
    assert SFT.eval_loss is counted_eval_loss
    model = tiny_model("llama")
    x, y = chat_like_batch(np.random.default_rng(2))
    rows = np.nonzero(y != IGNORE_INDEX)
    logits, ctx = model.family.forward(model.params, x, model.cfg, head_rows=rows)
    full, _ = model.family.forward(model.params, x, model.cfg)
    assert logits.shape == (len(rows[0]), VOCAB)
    np.testing.assert_allclose(logits, full[rows], rtol=FLOAT64_RTOL)
