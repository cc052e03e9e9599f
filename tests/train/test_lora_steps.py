"""LoRA through the training seam: train_step with the adapters as params and the base (plus the
adapters' constants) as frozen lowers the loss, moves only the adapters, and the merged model
gives the LoRA model's logits."""
from __future__ import annotations

import numpy as np

from glassformer.io.peft import LoraConfig, adapter_constants, init_adapters, merge_adapters
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.train.optim import adamw_init
from glassformer.train.step import train_step

# merged (x (W + s A B)) vs unmerged (x W + s (x A) B) float32 logits: rounding only
MERGE_ATOL = 1e-5


def test_lora_steps_train_the_adapters_only():
    cfg = llama.LlamaConfig(vocab_size=13, n_layer=2, n_head=2, d_model=16, max_seq_len=16)
    model = Model(cfg, llama.init_params(cfg, np.random.default_rng(0)))
    base = {k: v.copy() for k, v in model.params.items()}
    lora_cfg = LoraConfig(r=4, alpha=8, dropout=0.1, targets=("q_proj", "v_proj", "up_proj"))
    rng = np.random.default_rng(1)
    adapters = init_adapters(model, lora_cfg, rng)
    frozen = {**model.params, **adapter_constants(adapters, lora_cfg)}
    opt = adamw_init(adapters)
    x = rng.integers(0, 13, (4, 8))
    y = np.roll(x, -1, axis=1)   # a pattern the adapters can learn
    losses = [train_step(model.family, adapters, cfg, [(x, y)], opt, rng=rng, grad_clip=1.0,
                         lr=3e-2, frozen=frozen)[0] for _ in range(15)]
    assert losses[-1] < losses[0] - 0.1, losses
    assert set(opt.m) == set(adapters) and len(adapters) == 2 * 3 * cfg.n_layer
    for name, value in base.items():             # the base never moved
        np.testing.assert_array_equal(model.params[name], value)
    merged = merge_adapters(model, adapters, lora_cfg)
    lora_logits, _ = model.family.forward({**frozen, **adapters}, x, cfg)
    np.testing.assert_allclose(merged(x), lora_logits, atol=MERGE_ATOL)
